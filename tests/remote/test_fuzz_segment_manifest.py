"""Fuzzing rlmm's own segment manifest (the custom metadata of a copy, read back from the
metadata log) under a 1 GiB address-space cap (issue 31): real encodings mutated in
their msgpack structure and bytes end in a manifest or a CorruptObjectError naming the
field, within a second.
"""

from __future__ import annotations

import random

import msgpack

from remote.manifest import ObjectChecksum, SegmentManifest
from remote.naming import OBJECT_KINDS
from tests.fuzzing import assert_clean, interesting_int, mutate_bytes, run_fuzz, weird_value

HERE = "tests.remote.test_fuzz_segment_manifest"


def real(rng: random.Random) -> bytes:
    objects = {
        kind: ObjectChecksum(rng.randrange(2**31), rng.randrange(2**32))
        for kind in OBJECT_KINDS
        if rng.random() < 0.9
    }
    # Half version 2 (with the smallest timestamp), half version 1.
    smallest = rng.choice((None, -1, 0, rng.randrange(2**41), 2**63 - 1))
    return SegmentManifest(objects, smallest).encode()


def fuzz_segment_manifest(rng: random.Random) -> None:
    data = real(rng)
    if rng.random() < 0.5:
        version, entries, *rest = msgpack.unpackb(data)
        at = rng.randrange(len(entries))
        op = rng.randrange(6)
        if op == 0:
            entries[at] = weird_value(rng)
        elif op == 1 and entries[at]:
            entries[at][rng.randrange(2)] = interesting_int(rng) % 2**64 or weird_value(rng)
        elif op == 2:
            entries.insert(at, None)
        elif op == 3:
            version = weird_value(rng)
        elif op == 4:
            rest = [weird_value(rng)]  # the smallest timestamp, or a field too many
        else:
            rest = rest[:-1] if rest else [interesting_int(rng)]
        try:
            data = msgpack.packb([version, entries, *rest])
        except (OverflowError, TypeError, ValueError):
            data = real(rng)
    SegmentManifest.decode(mutate_bytes(rng, data) if rng.random() < 0.5 else data)


def test_fuzz_under_a_1_gib_cap() -> None:
    allowed = ["remote.errors.CorruptObjectError"]
    assert_clean(run_fuzz([(f"{HERE}:fuzz_segment_manifest", allowed)]))
