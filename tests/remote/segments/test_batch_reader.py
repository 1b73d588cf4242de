"""RecordBatchReader mechanics: sources, chunk boundaries, start positions, views."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from remote.segments import (
    RecordBatchReader,
    decode_batch,
    iter_batch_headers,
    iter_records,
    lookup_offset,
    read_offset_index,
)
from tests.remote.segments._data import TIMEINDEX_TEST, TOPIC_A

LOG = TIMEINDEX_TEST / f"{0:020d}.log"


@pytest.mark.parametrize("chunk_size", [61, 100, 1000, 4096, 1 << 23])
def test_chunk_boundaries_and_views_stay_valid(chunk_size: int) -> None:
    reference = RecordBatchReader(LOG.read_bytes()).headers()
    pairs = list(RecordBatchReader(LOG, chunk_size=chunk_size).batches())
    assert [h for h, _ in pairs] == reference
    # Views handed out earlier must still hold their batch after later refills.
    records = [r for h, view in pairs for r in decode_batch(h, view)]
    assert [r.offset for r in records] == list(range(7729))


def test_multi_record_batches_larger_than_the_chunk() -> None:
    headers = RecordBatchReader(TOPIC_A / f"{0:020d}.log", chunk_size=256).headers()
    assert [h.record_count for h in headers] == [37, 29, 5, 4, 4, 283]


def test_sources_agree() -> None:
    data = LOG.read_bytes()
    expected = RecordBatchReader(LOG).headers()
    assert RecordBatchReader(data).headers() == expected
    assert RecordBatchReader(bytearray(data)).headers() == expected
    assert RecordBatchReader(memoryview(data)).headers() == expected
    assert RecordBatchReader(io.BytesIO(data)).headers() == expected
    assert RecordBatchReader(str(LOG)).headers() == expected
    with LOG.open("rb") as f:
        assert RecordBatchReader(f).headers() == expected
    assert list(iter_batch_headers(LOG)) == expected


def test_start_position_from_the_offset_index() -> None:
    index = read_offset_index(TIMEINDEX_TEST / f"{0:020d}.index", 0)
    target = 5000
    position = lookup_offset(index, target)
    assert position > 0
    headers = RecordBatchReader(LOG, start_position=position).headers()
    assert headers[0].position == position
    assert headers[0].base_offset <= target <= headers[-1].last_offset
    records = list(iter_records(LOG, start_position=position))
    assert records[0].offset == headers[0].base_offset and records[-1].offset == 7728


def test_reader_state_after_a_clean_scan(tmp_path: Path) -> None:
    reader = RecordBatchReader(LOG)
    assert sum(1 for _ in reader) == 7729
    assert (reader.batch_count, reader.valid_bytes, reader.truncated_bytes) == (7729, 1048924, 0)
    assert reader.error is None and reader.name == str(LOG)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert RecordBatchReader(empty).headers() == []
    with pytest.raises(ValueError, match="chunk_size"):
        RecordBatchReader(LOG, chunk_size=10)
