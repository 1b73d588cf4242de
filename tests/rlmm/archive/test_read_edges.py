"""Edge cases of reading: a transaction still open at the archive's end (read_committed
stops at the last stable offset), LogAppendTime batches, and bad requests."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest

from remote.segments import PartitionDir, PartitionDirWriter, RecordBatchReader, generate_records
from rlmm.archive import ArchiveError, ReadRequest, RowBounds, open_metadata_view, plan_slices
from rlmm.archive.reader import read_slice
from rlmm.config import RlmmConfig
from tests.remote.segments._data import kafka_python_records
from tests.rlmm.archive.archive_data import make_config, offload, rows


def read_all(config: RlmmConfig, request: ReadRequest) -> list[tuple[Any, ...]]:
    with open_metadata_view(config) as view:
        slices = plan_slices(view, request, config.remote_options())
    return [r for piece in slices for r in rows(read_slice(piece))]


def test_read_committed_stops_at_an_open_transaction(tmp_path: Path) -> None:
    with PartitionDirWriter(tmp_path / "logs", "open", 0, segment_records=40) as w:
        w.append_records(generate_records(50), batch_records=5)
        w.append_records(
            generate_records(10, start=50),
            producer_id=9,
            producer_epoch=0,
            transactional=True,
            batch_records=5,
        )
        w.append_records(generate_records(30, start=60), batch_records=5)  # no marker yet
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [PartitionDir(tmp_path / "logs" / "open-0")], skip_active=False))
    everything = read_all(config, ReadRequest(topics=("open",)))
    assert [r[0] for r in everything] == list(range(90))
    committed = read_all(config, ReadRequest(topics=("open",), isolation_level="read_committed"))
    assert [r[0] for r in committed] == list(range(50))  # the last stable offset is 50
    explicit = ReadRequest(
        topics=("open",), isolation_level="read_committed", ending_offsets={("open", 0): 80}
    )
    assert [r[0] for r in read_all(config, explicit)] == list(range(50))


def _log_append_time(log: Path) -> None:
    """Turn every batch of ``log`` into a LogAppendTime batch (as a broker with
    message.timestamp.type=LogAppendTime writes it): attribute bit 3, CRC redone."""
    data = bytearray(log.read_bytes())
    for h in RecordBatchReader(bytes(data)).headers():
        (attributes,) = struct.unpack_from(">h", data, h.position + 21)
        struct.pack_into(">h", data, h.position + 21, attributes | 0x08)
        crc = crc32c.crc32c(bytes(data[h.position + 21 : h.position + h.size_in_bytes]))
        struct.pack_into(">I", data, h.position + 17, crc)
    log.write_bytes(bytes(data))


def test_log_append_time_batches(tmp_path: Path) -> None:
    with PartitionDirWriter(tmp_path / "logs", "lat", 0, segment_records=40) as w:
        w.append_records(generate_records(100), batch_records=7)
    pdir = PartitionDir(tmp_path / "logs" / "lat-0")
    for seg in pdir.segments():
        _log_append_time(seg.log_path)
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [pdir], skip_active=False))
    for headers in (False, True):
        got = read_all(config, ReadRequest(topics=("lat",), include_headers=headers))
        theirs = [
            (k.offset, k.key, k.value, k.timestamp)
            for seg in pdir.segments()
            for k in kafka_python_records(seg.log_path.read_bytes())
        ]
        assert [(r[0], r[1], r[2], r[4]) for r in got] == theirs
        assert {r[5] for r in got} == {1}  # LogAppendTime
    # Each record carries its batch's max timestamp, not its own create time.
    assert got[0][4] == 1_700_000_000_006
    # A window: exactly the rows whose batch timestamp is in it (batches stamped after
    # it are skipped whole, undecoded).
    stamps = sorted({r[4] for r in got})
    lo, hi = stamps[2], stamps[5]
    where = RowBounds(min_timestamp_ms=lo, max_timestamp_ms=hi)
    window = read_all(config, ReadRequest(topics=("lat",), include_headers=True, where=where))
    assert window == [r for r in got if lo <= r[4] <= hi] and len(window) == 4 * 7


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "exactly one of topics, pattern or partitions"),
        ({"topics": ("a",), "pattern": "b"}, r"got topics, pattern"),
        ({"topics": "abc"}, "got the string 'abc'"),
        ({"topics": ("a",), "starting_offsets": {("a", 0): -1}}, "starting_offsets: -1 for a-0"),
        ({"topics": ("a",), "ending_offsets": {("a", 0): -2}}, "ending_offsets: -2 for a-0"),
        ({"topics": ("a",), "starting_offsets": {"a": 3}}, "key 'a' is not a"),
        ({"topics": ("a",), "isolation_level": "dirty"}, "isolation_level must be"),
        ({"topics": ("a",), "max_slice_bytes": 0}, "max_slice_bytes must be a positive"),
        (
            {"topics": ("a",), "starting_offsets": {}, "starting_timestamp_ms": 5},
            "not both",
        ),
        ({"partitions": {"a": ()}}, "is not a list of partitions"),
        ({"topics": ("a",), "starting_timestamp_strategy": "x"}, "'error' or 'latest'"),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        ReadRequest(**fields)


def test_bad_pattern_and_reversed_bounds(tmp_path: Path) -> None:
    with PartitionDirWriter(tmp_path / "logs", "b", 0, segment_records=40) as w:
        w.append_records(generate_records(60), batch_records=5)
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [PartitionDir(tmp_path / "logs" / "b-0")], skip_active=False))
    with open_metadata_view(config) as view:
        with pytest.raises(ArchiveError, match="not a valid regex"):
            plan_slices(view, ReadRequest(pattern="("), config.remote_options())
        reversed_bounds = ReadRequest(
            topics=("b",), starting_offsets={("b", 0): 30}, ending_offsets={("b", 0): 10}
        )
        with pytest.raises(ArchiveError, match="b-0: starting offset 30 is after ending offset"):
            plan_slices(view, reversed_bounds, config.remote_options())


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_records_that_cannot_be_decoded(tmp_path: Path, codec: str, caplog: Any) -> None:
    """A batch whose CRC is right but whose records are not (it declares one record more
    than it holds): named with its position, or skipped whole, never half-read."""
    import logging

    from rlmm.archive import CorruptBatchError

    with PartitionDirWriter(tmp_path / "logs", "u", 0, segment_records=50, compression=codec) as w:
        w.append_records(generate_records(120), batch_records=10)
    pdir = PartitionDir(tmp_path / "logs" / "u-0")
    log = pdir.segments()[1].log_path
    data = bytearray(log.read_bytes())
    bad = RecordBatchReader(bytes(data)).headers()[2]
    (count,) = struct.unpack_from(">i", data, bad.position + 57)
    struct.pack_into(">i", data, bad.position + 57, count + 1)
    crc = crc32c.crc32c(bytes(data[bad.position + 21 : bad.position + bad.size_in_bytes]))
    struct.pack_into(">I", data, bad.position + 17, crc)
    log.write_bytes(bytes(data))
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [pdir], skip_active=False))
    with pytest.raises(CorruptBatchError, match=f"byte position {bad.position}"):
        read_all(config, ReadRequest(topics=("u",), include_headers=True))
    lost = range(bad.base_offset, bad.last_offset + 1)
    for headers in (False, True):  # rows() checks that every column has every row
        with caplog.at_level(logging.WARNING):
            request = ReadRequest(topics=("u",), fail_on_data_loss=False, include_headers=headers)
            got = read_all(config, request)
        assert [r[0] for r in got] == [o for o in range(120) if o not in lost]
        assert [r[1] for r in got] == [str(o).encode() for o in range(120) if o not in lost]
        assert "batch skipped" in caplog.text


def test_a_segment_deleted_after_planning(tmp_path: Path, caplog: Any) -> None:
    import logging

    from rlmm.archive import DataLossError, remote_storage_for

    with PartitionDirWriter(tmp_path / "logs", "del", 0, segment_records=40) as w:
        w.append_records(generate_records(120), batch_records=5)
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [PartitionDir(tmp_path / "logs" / "del-0")], skip_active=False))
    with open_metadata_view(config) as view:
        slices = plan_slices(view, ReadRequest(topics=("del",)), config.remote_options())
    gone = slices[1]
    # retention deletes the middle segment between planning and reading
    remote_storage_for(config.remote_options()).delete_segment_objects(gone.segment)
    lost = r"del-0: offsets \[40, 80\) are lost: segment \S+ \(.*\) is not in remote storage"
    with pytest.raises(DataLossError, match=lost):
        list(read_slice(gone))
    with caplog.at_level(logging.WARNING):
        got = [
            r[0]
            for piece in slices
            for r in rows(read_slice(dataclasses.replace(piece, fail_on_data_loss=False)))
        ]
    assert got == [*range(40), *range(80, 120)]
    assert "are lost" in caplog.text


def test_a_truncated_segment_is_data_loss_like_a_deleted_one(tmp_path: Path, caplog: Any) -> None:
    """failOnDataLoss=false skips (logs, counts) an unreadable segment as it skips a
    deleted one; the message uses Kafka's id text."""
    import logging

    from rlmm.archive import DataLossError
    from rlmm.archive import reader as reader_module
    from rlmm.model import kafka_uuid_to_str

    with PartitionDirWriter(tmp_path / "logs", "trunc", 0, segment_records=40) as w:
        w.append_records(generate_records(120), batch_records=5)
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [PartitionDir(tmp_path / "logs" / "trunc-0")], skip_active=False))
    with open_metadata_view(config) as view:
        slices = plan_slices(view, ReadRequest(topics=("trunc",)), config.remote_options())
    middle = slices[1]
    root = Path(config.remote_options()["root"])
    [log_file] = [
        p
        for p in root.rglob("*.log")
        if kafka_uuid_to_str(middle.segment.remote_log_segment_id.id) in p.name
    ]
    log_file.write_bytes(log_file.read_bytes()[:-50])  # the object is cut short
    seg_id = kafka_uuid_to_str(middle.segment.remote_log_segment_id.id)
    with pytest.raises(DataLossError, match=f"segment {seg_id} .* cannot be read"):
        list(read_slice(middle))
    before = reader_module.skipped_slices
    with caplog.at_level(logging.WARNING):
        got = [
            r[0]
            for piece in slices
            for r in rows(read_slice(dataclasses.replace(piece, fail_on_data_loss=False)))
        ]
    assert got[:40] == list(range(40)) and got[-40:] == list(range(80, 120))
    assert reader_module.skipped_slices == before + 1
    assert "skipped (fail_on_data_loss is false)" in caplog.text and seg_id in caplog.text
