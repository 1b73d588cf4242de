"""The smallest record timestamp of a batch and of a segment: out-of-order timestamps
(negative deltas), every codec, legacy messages, LogAppendTime, and the manifest an RSM
writes from it."""

from __future__ import annotations

import random
from pathlib import Path

import crc32c
import pytest
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

from remote import LogSegmentData, SegmentManifest
from remote.local import LocalRemoteStorageManager
from remote.segment_data import log_segment_data
from remote.segments import (
    PartitionDir,
    PartitionDirWriter,
    ProducerRecord,
    RecordBatchReader,
    available_codecs,
    decode_batch,
    iter_records,
)
from remote.segments.timestamps import SmallestTimestamp, batch_smallest_timestamp
from tests.remote.conftest import make_metadata
from tests.remote.segments._data import segmentio_record_set

T0 = 1_700_000_000_000


def _out_of_order(count: int, seed: int = 7) -> list[ProducerRecord]:
    """Records whose timestamps jump back and forth by up to an hour: late records."""
    rng = random.Random(seed)
    return [
        ProducerRecord(b"k%d" % n, b"v%d" % n, (), T0 + n * 1000 + rng.randint(-3_600_000, 0))
        for n in range(count)
    ]


def _write(tmp_path: Path, records: list[ProducerRecord], codec: str) -> PartitionDir:
    with PartitionDirWriter(tmp_path, "t", 0, compression=codec, segment_bytes=1 << 30) as w:
        w.append_records(records, batch_records=50)
    return PartitionDir(tmp_path / "t-0")


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_the_full_scan_finds_the_true_minimum_not_the_base_timestamp(
    tmp_path: Path, codec: str
) -> None:
    if codec not in available_codecs():
        pytest.skip(f"{codec} needs cramjam")
    records = _out_of_order(1000)
    segment = _write(tmp_path, records, codec).segments()[0]
    batches = list(RecordBatchReader(segment.log_path).batches())
    # Negative deltas: in most batches some record is older than the first one.
    older = 0
    for header, data in batches:
        stamps = [r.timestamp for r in decode_batch(header, data)]
        assert batch_smallest_timestamp(header, data) == min(stamps)
        older += min(stamps) < header.base_timestamp
    assert older > len(batches) // 2
    summary = segment.summary(full_scan=True, verify_crc=True)
    assert summary.smallest_timestamp_ms == min(r.timestamp for r in records)
    assert summary.smallest_timestamp_ms == min(r.timestamp for r in iter_records(segment.log_path))
    assert summary.smallest_timestamp_ms < min(h.base_timestamp for h, _ in batches)
    # The quick path reads no record: the smallest timestamp is unknown, not guessed.
    assert segment.summary().smallest_timestamp_ms is None


@pytest.mark.parametrize("name", ["v1c-v1-v1c", "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc"])
def test_legacy_and_mixed_magic_batches(name: str) -> None:
    data = segmentio_record_set(name)
    smallest = SmallestTimestamp()
    for header, view in RecordBatchReader(data).batches():
        stamps = [r.timestamp for r in decode_batch(header, view)]
        assert batch_smallest_timestamp(header, view) == min(stamps)
        smallest.add(header, view)
    assert smallest.value == min(r.timestamp for r in iter_records(data))


def test_magic_0_has_no_timestamp() -> None:
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=b"k", value=b"v")
    data = bytes(builder.build())
    ((header, view),) = RecordBatchReader(data).batches()
    assert batch_smallest_timestamp(header, view) == -1


def test_log_append_time_batch_is_its_max_timestamp(tmp_path: Path) -> None:
    segment = _write(tmp_path, _out_of_order(50), "none").segments()[0]
    ((header, view),) = RecordBatchReader(segment.log_path).batches()
    # The broker's LogAppendTime: attribute bit 3, every record carries the max timestamp.
    patched = bytearray(view)
    patched[22] |= 0x08
    patched[17:21] = crc32c.crc32c(bytes(patched[21:])).to_bytes(4, "big")
    ((h2, v2),) = RecordBatchReader(bytes(patched), verify_crc=True).batches()
    assert h2.timestamp_type == 1
    assert batch_smallest_timestamp(h2, v2) == header.max_timestamp


def _copy(rsm: LocalRemoteStorageManager, data: LogSegmentData) -> SegmentManifest:
    custom = rsm.copy_log_segment_data(make_metadata(), data)
    assert custom is not None and len(custom) <= 128
    return SegmentManifest.decode(custom)


def test_the_rsm_records_it_from_the_offloader_or_finds_it(tmp_path: Path) -> None:
    records = _out_of_order(500)
    segment = _write(tmp_path / "log", records, "none").segments()[0]
    rsm = LocalRemoteStorageManager(tmp_path / "remote", fsync=False)
    # The offloader's path: the full scan's value travels in LogSegmentData.
    data = log_segment_data(segment, segment.summary(full_scan=True, verify_crc=True))
    assert data.smallest_timestamp_ms == min(r.timestamp for r in records)
    assert _copy(rsm, data).smallest_timestamp_ms == data.smallest_timestamp_ms
    # A broker that did not read the batches: the RSM scans the log for it.
    quick = log_segment_data(segment, segment.summary())
    assert quick.smallest_timestamp_ms is None
    assert _copy(rsm, quick).smallest_timestamp_ms == data.smallest_timestamp_ms


def test_a_log_that_does_not_parse_is_copied_with_a_version_1_manifest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    segment = _write(tmp_path / "log", _out_of_order(10), "none").segments()[0]
    data = log_segment_data(segment, segment.summary())
    segment.log_path.write_bytes(b"\x00" * 16 + b"\x07" + b"\x00" * 100)  # magic 7
    rsm = LocalRemoteStorageManager(tmp_path / "remote", fsync=False)
    assert _copy(rsm, data).smallest_timestamp_ms is None
    assert "smallest timestamp unknown" in caplog.text
