"""Fuzzing the archive reader's batch path under a 1 GiB address-space cap (issue 31):
``iter_batches`` over a fetched stream (in small reads) and the column builder that
decodes each batch, fed the mutated broker-written logs and compression bombs of
tests/remote/segments/test_fuzz_readers.py. Every input ends in Arrow rows or a
CorruptBatchError (the reader's wrapping of a batch that does not decode), within a
second; a MemoryError is never wrapped.
"""

from __future__ import annotations

import io
import random

from remote.streams import verifying_stream
from rlmm.archive.batches import iter_batches
from rlmm.archive.columns import ColumnBuilder
from rlmm.archive.errors import CorruptBatchError
from tests.fuzzing import assert_clean, run_fuzz
from tests.remote.segments.test_fuzz_readers import bombs, mutate_log, small_logs, v2_batch

HERE = "tests.rlmm.archive.test_fuzz_batches"


def warm() -> None:
    small_logs(), bombs()


def fuzz_archive_batches(rng: random.Random) -> None:
    if rng.random() < 0.1:
        codec, payload = rng.choice(bombs())
        data = v2_batch(codec, payload, rng.choice((1, 1000, 2**31 - 1)))
    else:
        data = mutate_log(rng, small_logs())
    source = io.BytesIO(data)
    stream = verifying_stream("fuzz.log", source.read, source.close, len(data))
    builder = ColumnBuilder("orders", 0, 0, 2**63 - 1, include_headers=rng.random() < 0.5)
    chunk = rng.choice((17, 100, 4096, 1 << 20))
    for header, view in iter_batches(stream, 0, segment_id="s", object_name="o", chunk_bytes=chunk):
        if header.is_control:
            continue
        try:
            builder.add(header, view)
        except MemoryError:
            raise
        except Exception as e:  # as rlmm.archive.reader wraps what aiokafka raises
            raise CorruptBatchError(str(e), "s", "o", header.position) from e
    builder.build()


def test_fuzz_under_a_1_gib_cap() -> None:
    allowed = ["rlmm.archive.errors.CorruptBatchError"]
    assert_clean(run_fuzz([(f"{HERE}:fuzz_archive_batches", allowed)]))
