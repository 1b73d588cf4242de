"""PartitionDirWriter: generated Kafka partition dirs read back by us and by kafka-python."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from pathlib import Path

import pytest

from remote.errors import SegmentFormatError, UnsupportedCompressionError
from remote.segments import (
    CODECS,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    AbortedTxn,
    PartitionDir,
    PartitionDirWriter,
    RecordBatchReader,
    available_codecs,
    generate_records,
    iter_records,
    read_leader_epoch_checkpoint,
    read_offset_index,
    read_partition_metadata,
    read_producer_snapshot,
    read_time_index,
    read_txn_index,
)
from tests.remote.segments._data import kafka_python_records


def _codec_param(name: str) -> object:
    return pytest.param(
        name,
        marks=pytest.mark.skipif(
            name not in available_codecs(),
            reason=f"{name} needs cramjam (aiokafka's codec library), not installed here",
        ),
    )


def _check_indexes(d: PartitionDir, interval: int) -> None:
    for seg in d.segments():
        headers = RecordBatchReader(seg.log_path, verify_crc=True).headers()
        by_position = {h.position: h for h in headers}
        offsets = read_offset_index(seg.offset_index_path, seg.base_offset)
        for oe in offsets:
            assert by_position[oe.position].last_offset == oe.offset
        positions = [0] + [e.position for e in offsets]
        # Kafka's rule: a new entry once more than index.interval.bytes went by.
        assert all(b - a > interval for a, b in itertools.pairwise(positions))
        times = read_time_index(seg.time_index_path, seg.base_offset)
        records = {r.offset: r for r in iter_records(seg.log_path)}
        for e in times:
            assert records[e.offset].timestamp == e.timestamp
        if seg.next_base_offset is not None:  # rolled: the last entry holds the segment max
            assert times[-1].timestamp == max(h.max_timestamp for h in headers)


@pytest.mark.parametrize("codec", [_codec_param(c) for c in CODECS])
def test_every_codec_round_trips(tmp_path: Path, codec: str) -> None:
    topic_id = uuid.uuid4()
    records = generate_records(600, value_size=200)
    with PartitionDirWriter(
        tmp_path, "orders", 3, topic_id=topic_id, compression=codec, segment_bytes=16384
    ) as w:
        w.append_records(records, batch_records=7)
    d = PartitionDir(tmp_path / "orders-3")
    assert (d.topic, d.partition, d.topic_id) == ("orders", 3, topic_id)
    segments = d.segments()
    assert len(segments) > 1
    ours = [r for s in segments for r in iter_records(s.log_path)]
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in ours] == [
        (n, p.key, p.value, p.headers, p.timestamp) for n, p in enumerate(records)
    ]
    theirs = [k for s in segments for k in kafka_python_records(s.log_path.read_bytes())]
    assert [(k.offset, k.key, k.value, k.headers, k.timestamp) for k in theirs] == [
        (r.offset, r.key, r.value, r.headers, r.timestamp) for r in ours
    ]
    for s in segments:
        assert {h.compression_type for h in RecordBatchReader(s.log_path)} == {CODECS[codec]}
    _check_indexes(d, 4096)
    # Summaries chain: each segment ends right before the next begins.
    summaries = [s.summary() for s in segments]
    assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(summaries))
    assert summaries[-1].end_offset == 599
    for s, summary in zip(segments, summaries, strict=True):
        full = s.summary(full_scan=True, verify_crc=True)
        assert summary == dataclasses.replace(full, smallest_timestamp_ms=None)
        assert full.smallest_timestamp_ms == min(r.timestamp for r in iter_records(s.log_path))
        assert summary.producer_snapshot_path is not None
        assert summary.segment_leader_epochs == {0: s.base_offset}


def test_roll_by_record_count_and_sizes(tmp_path: Path) -> None:
    with PartitionDirWriter(tmp_path, "t", 0, segment_records=100, segment_bytes=1 << 30) as w:
        w.append_records(generate_records(1000, value_size=50), batch_records=10)
    d = PartitionDir(tmp_path / "t-0")
    assert [s.base_offset for s in d.segments()] == list(range(0, 1000, 100))
    assert list(d.producer_snapshots()) == list(range(100, 1001, 100))
    for s in d.segments():
        assert s.summary().size_in_bytes == s.log_path.stat().st_size
        assert s.summary().end_offset == s.base_offset + 99
    _check_indexes(d, 4096)


def test_transactions_control_batches_and_txn_index(tmp_path: Path) -> None:
    ts = 1_700_000_000_000
    with PartitionDirWriter(tmp_path, "txn", 1, segment_records=45) as w:
        w.append_records(generate_records(10), batch_records=5)  # offsets 0..9
        w.append_batch(
            generate_records(3, start=10), producer_id=7, producer_epoch=2, transactional=True
        )
        w.append_batch(
            generate_records(3, start=13), producer_id=8, producer_epoch=0, transactional=True
        )
        w.append_batch(
            generate_records(2, start=16), producer_id=7, producer_epoch=2, transactional=True
        )
        abort = w.abort_transaction(7, 2, coordinator_epoch=5, timestamp=ts)  # offset 18
        commit = w.commit_transaction(8, 0, coordinator_epoch=5, timestamp=ts)  # offset 19
        w.append_batch(
            generate_records(25, start=20), producer_id=9, producer_epoch=0, transactional=True
        )
        w.append_batch(
            generate_records(5, start=45), producer_id=9, producer_epoch=0, transactional=True
        )
        w.abort_transaction(9, 0, timestamp=ts)  # offset 50, in the second segment
    assert (abort.base_offset, commit.base_offset) == (18, 19)
    assert abort.is_control and abort.is_transactional and abort.producer_id == 7
    d = PartitionDir(tmp_path / "txn-1")
    first, second = d.segments()
    # Producer 8's txn (first offset 13) was open when 7 aborted: LSO 13.
    assert read_txn_index(first.txn_index_path) == [AbortedTxn(7, 10, 18, 13)]
    assert read_txn_index(second.txn_index_path) == [AbortedTxn(9, 20, 50, 51)]
    assert not first.summary().txn_index_empty and not second.summary().txn_index_empty

    records = list(iter_records(first.log_path)) + list(iter_records(second.log_path))
    controls = [r for r in records if r.is_control]
    assert [(r.offset, r.control_type) for r in controls] == [
        (18, CONTROL_ABORT),
        (19, CONTROL_COMMIT),
        (50, CONTROL_ABORT),
    ]
    assert all(r.is_transactional for r in records if r.offset >= 10)
    assert not any(r.is_transactional for r in records if r.offset < 10)
    theirs = kafka_python_records(first.log_path.read_bytes())
    assert [k.offset for k in theirs if k.is_control] == [18, 19]
    data = [r for r in records if not r.is_control]
    assert len(data) == 48 and all(r.key == str(r.offset).encode() for r in data)

    # The snapshot at the roll (offset 40) has producer 9 mid-transaction.
    at_roll = {
        e.producer_id: e for e in read_producer_snapshot(tmp_path / "txn-1" / f"{45:020d}.snapshot")
    }
    assert at_roll[9].current_txn_first_offset == 20
    assert at_roll[7].coordinator_epoch == 5 and at_roll[7].current_txn_first_offset == -1
    assert (at_roll[9].last_sequence, at_roll[9].last_offset, at_roll[9].offset_delta) == (
        24,
        44,
        24,
    )
    final = {
        e.producer_id: e for e in read_producer_snapshot(tmp_path / "txn-1" / f"{51:020d}.snapshot")
    }
    assert final[9].current_txn_first_offset == -1 and final[9].last_sequence == 29


def test_leader_epochs_and_segment_slices(tmp_path: Path) -> None:
    with PartitionDirWriter(tmp_path, "ep", 0, segment_records=30, leader_epoch=3) as w:
        w.append_records(generate_records(20), batch_records=5)  # epoch 3: 0..19
        w.set_leader_epoch(5)
        w.append_records(generate_records(30, start=20), batch_records=5)  # epoch 5: 20..49
        w.set_leader_epoch(6)
        w.set_leader_epoch(8)  # epoch 6 wrote nothing and is not checkpointed
        w.append_records(generate_records(10, start=50), batch_records=5)  # epoch 8: 50..59
        with pytest.raises(ValueError, match="leader epoch"):
            w.set_leader_epoch(7)
    d = PartitionDir(tmp_path / "ep-0")
    entries = read_leader_epoch_checkpoint(d.path / "leader-epoch-checkpoint")
    assert [(e.epoch, e.start_offset) for e in entries] == [(3, 0), (5, 20), (8, 50)]
    assert [s.summary().segment_leader_epochs for s in d.segments()] == [
        {3: 0, 5: 20},
        {5: 30, 8: 50},
    ]
    headers = [h for s in d.segments() for h in RecordBatchReader(s.log_path)]
    assert {h.partition_leader_epoch for h in headers if h.base_offset >= 50} == {8}


def test_partition_metadata_matches_broker_bytes(tmp_path: Path) -> None:
    from rlmm.model import kafka_uuid_from_str

    topic_id = kafka_uuid_from_str("p59PN4qkR8y176nhuDDPPA")
    PartitionDirWriter(tmp_path, "x", 0, topic_id=topic_id).close()
    written = (tmp_path / "x-0" / "partition.metadata").read_bytes()
    assert written == b"version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA"
    assert read_partition_metadata(tmp_path / "x-0" / "partition.metadata").topic_id == topic_id


def test_writer_refuses_bad_setup(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedCompressionError, match="brotli"):
        PartitionDirWriter(tmp_path, "x", 0, compression="brotli")
    for codec in set(CODECS) - set(available_codecs()):
        with pytest.raises(UnsupportedCompressionError, match="cramjam"):
            PartitionDirWriter(tmp_path, "x", 0, compression=codec)
    (tmp_path / "y-0").mkdir()
    (tmp_path / "y-0" / "00000000000000000000.log").write_bytes(b"")
    with pytest.raises(SegmentFormatError, match="not empty"):
        PartitionDirWriter(tmp_path, "y", 0)
    with PartitionDirWriter(tmp_path, "z", 0) as w:
        with pytest.raises(ValueError, match="at least one record"):
            w.append_batch([])
        with pytest.raises(ValueError, match="producer id"):
            w.append_batch(generate_records(1), transactional=True)
    with pytest.raises(ValueError, match="closed"):
        w.append_batch(generate_records(1))
