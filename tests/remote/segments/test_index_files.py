"""Index and state file parsers: round trips with the encoders, and every bad input."""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote.errors import SegmentFormatError
from remote.segments import (
    AbortedTxn,
    EpochEntry,
    OffsetIndexEntry,
    ProducerStateEntry,
    TimeIndexEntry,
    encode_leader_epoch_checkpoint,
    encode_offset_index,
    encode_partition_metadata,
    encode_producer_snapshot,
    encode_time_index,
    encode_txn_index,
    last_offset_index_entry,
    leader_epochs_in_range,
    lookup_offset,
    parse_partition_dir_name,
    read_leader_epoch_checkpoint,
    read_offset_index,
    read_partition_metadata,
    read_producer_snapshot,
    read_time_index,
    read_txn_index,
)
from tests.remote.segments._data import TIMEINDEX_TEST


def test_offset_index_round_trip_and_preallocated_tail() -> None:
    entries = [OffsetIndexEntry(105, 4100), OffsetIndexEntry(140, 8300)]
    data = encode_offset_index(entries, 100)
    assert read_offset_index(data, 100) == entries
    # An active segment's index is preallocated with zeros: they are not entries.
    assert read_offset_index(data + bytes(80), 100) == entries
    assert lookup_offset(entries, 104) == 0
    assert lookup_offset(entries, 105) == 4100
    assert lookup_offset(entries, 139) == 4100
    assert lookup_offset(entries, 10_000) == 8300


@given(
    st.lists(st.integers(1, 1 << 12), max_size=300),
    st.integers(0, 2000),
    st.booleans(),
)
def test_last_offset_index_entry_is_the_full_readers_last(
    gaps: list[int], preallocated: int, first_at_zero: bool
) -> None:
    """The binary search over a preallocated index finds the entry the full read ends
    with: any number of entries (none, one at relative offset 0 and position 0), any
    zero-filled tail."""
    entries, offset, position = [], 100, 0
    if first_at_zero:
        entries.append(OffsetIndexEntry(100, 0))
    for gap in gaps:
        offset, position = offset + gap, position + 4 * gap
        entries.append(OffsetIndexEntry(offset, position))
    data = encode_offset_index(entries, 100) + bytes(8 * preallocated)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "00000000000000000100.index")
        path.write_bytes(data)
        found = last_offset_index_entry(path, 100)
    full = read_offset_index(data, 100)
    assert found == (full[-1] if full else None)


@pytest.mark.parametrize("written", [0, 1, 2, 3, 7, 100])
def test_last_offset_index_entry_reads_a_few_entries_not_the_file(
    tmp_path: Path, written: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An active segment's index is preallocated at 10 MiB of zeros; the sidecar asks
    # for its last entry every round: reading it whole cost 10 MiB a partition a round.
    entries = [OffsetIndexEntry(500 + 3 * i, 40 * i) for i in range(written)]  # (0, 0) first
    path = tmp_path / "00000000000000000500.index"
    path.write_bytes(encode_offset_index(entries, 500) + bytes(10 * 1024 * 1024))
    reads: list[int] = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
    found = last_offset_index_entry(path, 500)
    assert sum(reads) <= 8 * 24  # a binary search over 1.3M entries
    # the parser's answer (a zero first entry is an entry: relative offset 0 at 0)
    assert [found] == read_offset_index(path, 500)[-1:]
    assert found == (entries[-1] if entries else OffsetIndexEntry(500, 0))
    # a file the broker trimmed at a roll, and an empty one
    path.write_bytes(encode_offset_index(entries, 500))
    assert last_offset_index_entry(path, 500) == (entries[-1] if entries else None)


def test_last_offset_index_entry_errors(tmp_path: Path) -> None:
    missing = tmp_path / "00000000000000000000.index"
    with pytest.raises(SegmentFormatError, match="cannot read") as e:
        last_offset_index_entry(missing, 0)
    assert e.value.path == str(missing)
    negative = tmp_path / "00000000000000000001.index"
    negative.write_bytes(struct.pack(">iiii", 3, 100, 7, -5) + bytes(64))
    with pytest.raises(SegmentFormatError, match="negative") as e:
        last_offset_index_entry(negative, 0)
    assert (e.value.path, e.value.position) == (str(negative), 8)


def test_offset_index_errors() -> None:
    with pytest.raises(SegmentFormatError, match="whole number") as e:
        read_offset_index(bytes(12), 0, name="00.index")
    assert (e.value.path, e.value.position) == ("00.index", 8)
    backwards = struct.pack(">iiii", 10, 500, 5, 900)
    with pytest.raises(SegmentFormatError, match="not after the previous") as e:
        read_offset_index(backwards, 0)
    assert e.value.position == 8


def test_time_index_round_trip_and_errors() -> None:
    entries = [TimeIndexEntry(1000, 7), TimeIndexEntry(1000, 9), TimeIndexEntry(2000, 9)]
    assert read_time_index(encode_time_index(entries, 5), 5) == entries
    with pytest.raises(SegmentFormatError, match="backwards"):
        read_time_index(encode_time_index([TimeIndexEntry(5, 1), TimeIndexEntry(4, 2)], 0), 0)
    with pytest.raises(SegmentFormatError, match="12-byte"):
        read_time_index(bytes(13), 0)


def test_txn_index_round_trip_and_errors() -> None:
    entries = [AbortedTxn(7, 10, 18, 13), AbortedTxn(9, 20, 50, 51)]
    data = encode_txn_index(entries)
    assert len(data) == 68
    assert read_txn_index(data) == entries
    with pytest.raises(SegmentFormatError, match="invalid"):
        read_txn_index(struct.pack(">hqqqq", 1, 7, 10, 18, 13))
    with pytest.raises(SegmentFormatError, match="invalid"):
        read_txn_index(struct.pack(">hqqqq", 0, 7, 10, 9, 13))
    with pytest.raises(SegmentFormatError, match="34-byte"):
        read_txn_index(data[:-1])


def test_leader_epoch_checkpoint_round_trip_and_errors() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(4, 120)]
    data = encode_leader_epoch_checkpoint(entries)
    assert data == b"0\n3\n0 0\n3 120\n4 120\n"
    assert read_leader_epoch_checkpoint(data) == entries
    assert (TIMEINDEX_TEST / "leader-epoch-checkpoint").read_bytes() == (
        encode_leader_epoch_checkpoint([EpochEntry(0, 0)])
    )
    for bad, match in [
        (b"1\n0\n", "version"),
        (b"0\n2\n0 0\n", "entry count 2 but 1"),
        (b"0\nx\n", "not an integer"),
        (b"0\n1\n0 zero\n", "not '<epoch> <start offset>'"),
        (b"0\n2\n3 0\n2 5\n", "not after the previous"),
        (b"0\n", "missing"),
        (b"\xff\xfe", "not UTF-8"),
    ]:
        with pytest.raises(SegmentFormatError, match=match):
            read_leader_epoch_checkpoint(bad, name="leader-epoch-checkpoint")


def test_leader_epochs_in_range() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(2, 100), EpochEntry(5, 250)]
    assert leader_epochs_in_range(entries, 0, 100) == {0: 0}
    assert leader_epochs_in_range(entries, 50, 300) == {0: 50, 2: 100, 5: 250}
    assert leader_epochs_in_range(entries, 100, 250) == {2: 100}
    assert leader_epochs_in_range(entries, 120, 251) == {2: 120, 5: 250}
    assert leader_epochs_in_range(entries, 400, 500) == {5: 400}
    assert leader_epochs_in_range([EpochEntry(3, 10)], 0, 5) == {}


def test_producer_snapshot_round_trip_and_errors() -> None:
    real = (TIMEINDEX_TEST / "00000000000000007729.snapshot").read_bytes()
    entries = read_producer_snapshot(real)
    assert encode_producer_snapshot(entries) == real  # byte-identical to the broker's file
    assert read_producer_snapshot(encode_producer_snapshot([])) == []
    e2 = [ProducerStateEntry(5, 1, 9, 99, 3, 1234, 2, 90), *entries]
    assert read_producer_snapshot(encode_producer_snapshot(e2)) == e2
    flipped = real[:20] + bytes([real[20] ^ 4]) + real[21:]
    with pytest.raises(SegmentFormatError, match="CRC-32C mismatch") as e:
        read_producer_snapshot(flipped, name="7729.snapshot")
    assert e.value.path == "7729.snapshot"
    with pytest.raises(SegmentFormatError, match="version 0"):
        read_producer_snapshot(b"\x00\x00" + real[2:])
    with pytest.raises(SegmentFormatError, match="shorter"):
        read_producer_snapshot(real[:5])
    with pytest.raises(SegmentFormatError, match="CRC"):
        read_producer_snapshot(real[:-1])


def test_partition_metadata(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    path = tmp_path / "partition.metadata"
    path.write_bytes(encode_partition_metadata(topic_id) + b"\n")
    assert read_partition_metadata(path).topic_id == topic_id
    for bad in [b"version: 1\ntopic_id: p59PN4qkR8y176nhuDDPPA", b"version: 0\n", b"garbage"]:
        path.write_bytes(bad)
        with pytest.raises(SegmentFormatError, match=str(path)):
            read_partition_metadata(path)
    with pytest.raises(SegmentFormatError, match="cannot read"):
        read_partition_metadata(tmp_path / "missing")


def test_partition_dir_names() -> None:
    assert parse_partition_dir_name("orders-3") == ("orders", 3)
    assert parse_partition_dir_name("my-topic.v2-12") == ("my-topic.v2", 12)
    assert parse_partition_dir_name("__remote_log_metadata-49") == ("__remote_log_metadata", 49)
    uid = "0123456789abcdef0123456789abcdef"
    assert parse_partition_dir_name(f"orders-3.{uid}-delete") == ("orders", 3)
    assert parse_partition_dir_name(f"orders-3.{uid}-future") == ("orders", 3)
    for bad in ["orders", "orders-", "-3", "orders-x", "bad/name-1", "a b-1"]:
        with pytest.raises(SegmentFormatError, match="not a Kafka partition dir name"):
            parse_partition_dir_name(bad)


@given(st.binary(max_size=200))
def test_parsers_only_raise_segment_format_error(data: bytes) -> None:
    for parse in (
        lambda: read_offset_index(data, 0),
        lambda: read_time_index(data, 0),
        lambda: read_txn_index(data),
        lambda: read_leader_epoch_checkpoint(data),
        lambda: read_producer_snapshot(data),
        lambda: read_partition_metadata(data),
    ):
        with contextlib.suppress(SegmentFormatError):
            parse()
