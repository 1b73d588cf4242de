"""Real broker-written segments (pinterest/tiered-storage), cross-checked with kafka-python."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import uuid
from pathlib import Path

import pytest

from remote.errors import SegmentFormatError
from remote.segments import (
    PartitionDir,
    RecordBatchReader,
    iter_records,
    read_leader_epoch_checkpoint,
    read_offset_index,
    read_partition_metadata,
    read_producer_snapshot,
    read_time_index,
)
from rlmm.model import kafka_uuid_from_str
from tests.remote.segments._data import TIMEINDEX_TEST, TOPIC_A, TOPIC_B, kafka_python_records

SEGMENTS = [(0, 7729), (7729, 7634)]


@pytest.mark.parametrize(("base", "count"), SEGMENTS)
def test_timeindex_test_batches_and_records(base: int, count: int) -> None:
    log = TIMEINDEX_TEST / f"{base:020d}.log"
    reader = RecordBatchReader(log, verify_crc=True)
    headers = reader.headers()
    assert len(headers) == count
    assert reader.valid_bytes == log.stat().st_size and reader.truncated_bytes == 0
    assert all(h.record_count == 1 and h.magic == 2 for h in headers)
    assert [h.base_offset for h in headers] == list(range(base, base + count))
    # Batches are contiguous: each starts where the previous ended.
    assert all(a.end_position == b.position for a, b in itertools.pairwise(headers))
    assert all(h.producer_id == 0 and h.producer_epoch == 0 for h in headers)
    assert [h.base_sequence for h in headers] == list(range(base, base + count))

    records = list(iter_records(log))
    assert [r.offset for r in records] == list(range(base, base + count))
    assert [r.key for r in records] == [str(n).encode() for n in range(base, base + count)]
    assert [r.value for r in records] == [
        f"kafkaVal-{n}".encode() for n in range(base, base + count)
    ]
    assert all(len(r.headers) == 2 for r in records)
    assert records[0].headers == (
        ("header1", b"kafkaHeader1-val"),
        ("header2", b"kafkaHeader2-val"),
    )
    assert not any(r.is_transactional or r.is_control for r in records)

    theirs = kafka_python_records(log.read_bytes())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (k.offset, k.timestamp, k.key, k.value, k.headers) for k in theirs
    ]


@pytest.mark.parametrize(("base", "count"), SEGMENTS)
def test_timeindex_test_indexes_point_at_batches(base: int, count: int) -> None:
    headers = RecordBatchReader(TIMEINDEX_TEST / f"{base:020d}.log").headers()
    by_position = {h.position: h for h in headers}
    offsets = read_offset_index(TIMEINDEX_TEST / f"{base:020d}.index", base)
    assert len(offsets) == (249 if base == 0 else 252)
    for oe in offsets:
        # Kafka indexes a batch by its last offset and its start position.
        assert oe.position in by_position
        assert by_position[oe.position].last_offset == oe.offset

    times = read_time_index(TIMEINDEX_TEST / f"{base:020d}.timeindex", base)
    assert len(times) == (250 if base == 0 else 252)
    assert all(a.timestamp < b.timestamp for a, b in itertools.pairwise(times))
    by_offset = {h.last_offset: h for h in headers}
    running, max_so_far = {}, -1
    for h in headers:
        max_so_far = max(max_so_far, h.max_timestamp)
        running[h.last_offset] = max_so_far
    for e in times:
        # Each entry is the max timestamp so far and the offset that holds it.
        assert by_offset[e.offset].max_timestamp == e.timestamp == running[e.offset]
    assert times[-1].timestamp == max(h.max_timestamp for h in headers)


def test_timeindex_test_state_files() -> None:
    snapshot = read_producer_snapshot(TIMEINDEX_TEST / "00000000000000007729.snapshot")
    assert len(snapshot) == 1
    entry = snapshot[0]
    assert entry.producer_id == 0 and entry.producer_epoch == 0
    assert entry.last_sequence == 7728 and entry.last_offset == 7728
    assert entry.coordinator_epoch == -1 and entry.current_txn_first_offset == -1
    last = RecordBatchReader(TIMEINDEX_TEST / "00000000000000000000.log").headers()[-1]
    assert entry.timestamp == last.max_timestamp

    assert [
        (e.epoch, e.start_offset)
        for e in read_leader_epoch_checkpoint(TIMEINDEX_TEST / "leader-epoch-checkpoint")
    ] == [(0, 0)]
    meta = read_partition_metadata(TIMEINDEX_TEST / "partition.metadata")
    assert meta.version == 0
    assert meta.topic_id == kafka_uuid_from_str("p59PN4qkR8y176nhuDDPPA")
    assert isinstance(meta.topic_id, uuid.UUID)


def test_topic_a_multi_record_batches() -> None:
    for base, records_expected, batches_expected in ((0, 362, 6), (362, 282, 1)):
        log = TOPIC_A / f"{base:020d}.log"
        headers = RecordBatchReader(log, verify_crc=True).headers()
        assert len(headers) == batches_expected
        assert sum(h.record_count for h in headers) == records_expected
        records = list(iter_records(log))
        assert len(records) == records_expected
        assert [r.offset for r in records] == list(range(base, base + records_expected))
        assert all(len(r.headers) == 2 for r in records)
        theirs = kafka_python_records(log.read_bytes())
        assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
            (k.offset, k.key, k.value, k.headers) for k in theirs
        ]
    assert max(h.record_count for h in RecordBatchReader(TOPIC_A / f"{0:020d}.log")) == 283
    (entry,) = read_offset_index(TOPIC_A / f"{0:020d}.index", 0)
    by_position = {h.position: h for h in RecordBatchReader(TOPIC_A / f"{0:020d}.log")}
    assert by_position[entry.position].last_offset == entry.offset
    assert read_offset_index(TOPIC_A / f"{362:020d}.index", 362) == []
    assert read_producer_snapshot(TOPIC_A / f"{362:020d}.snapshot") == []
    # The time index holds the offset of the first record carrying the max timestamp.
    by_offset = {r.offset: r for r in iter_records(TOPIC_A / f"{0:020d}.log")}
    for e in read_time_index(TOPIC_A / f"{0:020d}.timeindex", 0):
        assert by_offset[e.offset].timestamp == e.timestamp


def test_topic_b_large_offsets_without_indexes() -> None:
    d = PartitionDir(TOPIC_B)
    assert (d.topic, d.partition, d.topic_id) == ("test_topic_b", 0, None)
    (segment,) = d.segments()
    assert segment.base_offset == 1613280
    headers = RecordBatchReader(segment.log_path, verify_crc=True).headers()
    assert len(headers) == 18 and sum(h.record_count for h in headers) == 4369
    summary = segment.summary()
    assert summary.end_offset == headers[-1].last_offset
    assert summary.segment_leader_epochs == {0: 1613280}
    assert summary.max_timestamp_ms == max(h.max_timestamp for h in headers)
    records = list(iter_records(segment.log_path))
    assert len(records) == 4369 and records[0].offset == 1613280
    assert [r.offset for r in records] == [
        k.offset for k in kafka_python_records(segment.log_path.read_bytes())
    ]


def test_dir_not_named_topic_partition() -> None:
    # "timeindex_test" is not "<topic>-<p>": refused unless topic and partition are given.
    with pytest.raises(SegmentFormatError, match="timeindex_test"):
        PartitionDir(TIMEINDEX_TEST)
    d = PartitionDir(TIMEINDEX_TEST, topic="timeindex_test", partition=0)
    assert [s.base_offset for s in d.segments()] == [0, 7729]


def test_real_dir_as_partition_dir(tmp_path: Path) -> None:
    target = tmp_path / "timeindex_test-0"
    shutil.copytree(TIMEINDEX_TEST, target)
    d = PartitionDir(target)
    assert (d.topic, d.partition) == ("timeindex_test", 0)
    assert d.topic_id == kafka_uuid_from_str("p59PN4qkR8y176nhuDDPPA")
    segments = d.segments()
    assert [s.base_offset for s in segments] == [0, 7729]
    assert list(d.producer_snapshots()) == [7729]
    first, second = (s.summary() for s in segments)
    assert (first.base_offset, first.end_offset, first.next_offset) == (0, 7728, 7729)
    assert first.size_in_bytes == 1048924
    assert first.segment_leader_epochs == {0: 0}
    assert first.txn_index_empty
    assert first.producer_snapshot_path == target / "00000000000000007729.snapshot"
    assert (second.end_offset, second.segment_leader_epochs) == (15362, {0: 7729})
    assert second.producer_snapshot_path is None
    for s in segments:
        full = s.summary(full_scan=True, verify_crc=True)
        # Only the full scan decodes the records for the smallest timestamp.
        assert s.summary() == dataclasses.replace(full, smallest_timestamp_ms=None)
        assert full.smallest_timestamp_ms == min(r.timestamp for r in iter_records(s.log_path))
        assert s.end_offset() == s.summary().end_offset
