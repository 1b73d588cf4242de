"""Real fetch-response record sets (segmentio/kafka-go): magic 1 and 2, gzip and none, mixed."""

from __future__ import annotations

import pytest

from remote.segments import RecordBatchReader, decode_batch, iter_records
from tests.remote.segments._data import kafka_python_records, segmentio_record_set

FIXTURES = {
    "v1c-v1-v1c": [(1, 1), (1, 0), (1, 0), (1, 1), (1, 1)],
    "v2c-v2-v2c": [(2, 1), (2, 0), (2, 1)],
    "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": [
        *[(1, 0), (1, 0), (1, 1), (1, 1)],
        *[(2, 0), (2, 0), (2, 1), (2, 1), (2, 0), (2, 1), (2, 0), (2, 1)],
        *[(1, 0), (1, 0), (1, 1)],
    ],
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_batches_one_slice_at_a_time(name: str) -> None:
    data = segmentio_record_set(name)
    reader = RecordBatchReader(data, verify_crc=True, allow_truncated_tail=False)
    headers = reader.headers()
    assert [(h.magic, h.compression_type) for h in headers] == FIXTURES[name]
    assert reader.valid_bytes == len(data)

    records = list(iter_records(data))
    theirs = kafka_python_records(data)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (k.offset, k.timestamp, k.key, k.value) for k in theirs
    ]
    assert [r.offset for r in records] == list(range(len(records)))
    # A compressed legacy wrapper carries the offset of its last inner record.
    for h, data_slice in RecordBatchReader(data).batches():
        inner = decode_batch(h, data_slice)
        assert inner[-1].offset == h.last_offset
        if h.magic == 2:
            assert inner[0].offset == h.base_offset and len(inner) == h.record_count
        assert all(r.timestamp_type == 0 for r in inner)


def test_legacy_and_v2_flags() -> None:
    data = segmentio_record_set("v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc")
    headers = RecordBatchReader(data).headers()
    legacy = [h for h in headers if h.magic == 1]
    assert all(h.producer_id == -1 and h.partition_leader_epoch == -1 for h in legacy)
    assert [h.record_count for h in legacy] == [1, 1, -1, -1, 1, 1, -1]
    assert all(h.timestamp_type == 0 and not h.is_control for h in headers)
