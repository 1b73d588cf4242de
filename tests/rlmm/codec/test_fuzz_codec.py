"""Fuzzing the ``__remote_log_metadata`` record decoder under a 1 GiB address-space cap
(issue 31): the records are what Kafka's own RLMM wrote (tests/data/aiven-tiered/*/
metadata.jsonl), mutated in their varint lengths and counts and fixed fields; each
ends in an event or a CodecError, within a second.
"""

from __future__ import annotations

import base64
import functools
import json
import random

from rlmm.codec import decode
from tests.fuzzing import DATA, assert_clean, mutate_bytes, run_fuzz

HERE = "tests.rlmm.codec.test_fuzz_codec"


@functools.cache
def records() -> list[bytes]:
    out = []
    for path in sorted((DATA / "aiven-tiered").glob("*/metadata.jsonl")):
        for line in path.read_text().splitlines():
            out.append(base64.b64decode(json.loads(line)["value"]))
    return out


def warm() -> None:
    records()


def fuzz_metadata_record(rng: random.Random) -> None:
    data = rng.choice(records())
    # Compact lengths and counts sit right after the 3-byte header, after the topic name
    # (length byte at 3), and around the fixed fields: aim at the first bytes often.
    fields = [(i, w) for i in range(3, min(len(data), 80)) for w in (1, 2, 4, 5)]
    decode(mutate_bytes(rng, data, fields=fields))


def test_fuzz_under_a_1_gib_cap() -> None:
    assert_clean(run_fuzz([(f"{HERE}:fuzz_metadata_record", ["rlmm.errors.CodecError"])]))


def test_the_fuzz_inputs_are_real() -> None:
    assert len(records()) > 50
    assert all(decode(r) is not None for r in records())
