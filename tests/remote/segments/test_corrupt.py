"""Bad input: torn tails stop cleanly; corruption gives SegmentFormatError (file, position)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote.errors import SegmentFormatError
from remote.segments import RecordBatchReader, decode_batch, iter_records
from tests.remote.segments._data import TOPIC_A, segmentio_record_set

SEGMENT = TOPIC_A / f"{0:020d}.log"  # 6 batches, 20999 bytes
BATCH_ENDS = [2076, 3732, 4068, 4349, 4630, 20999]
MIXED = segmentio_record_set("v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc")


@pytest.mark.parametrize("cut", [1, 16, 17, 60, 61, 2075, 2076, 4000, 20998])
def test_truncated_tail_stops_at_last_whole_batch(tmp_path: Path, cut: int) -> None:
    data = SEGMENT.read_bytes()[:cut]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    whole = [e for e in BATCH_ENDS if e <= cut]
    for source in (path, data, io.BytesIO(data)):
        reader = RecordBatchReader(source, verify_crc=True, chunk_size=1024)
        headers = reader.headers()
        assert len(headers) == len(whole)
        assert reader.valid_bytes == (whole[-1] if whole else 0)
        assert reader.truncated_bytes == cut - reader.valid_bytes
        assert reader.error is None
    records = list(iter_records(path))
    assert len(records) == sum(h.record_count for h in RecordBatchReader(data))
    if cut not in BATCH_ENDS:
        with pytest.raises(SegmentFormatError, match="truncated") as e:
            RecordBatchReader(path, allow_truncated_tail=False).headers()
        assert e.value.path == str(path) and e.value.position == reader.valid_bytes


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


@pytest.mark.parametrize("position", [2076 + 30, 4630 + 61, 20998])
def test_flipped_byte_is_a_crc_error(tmp_path: Path, position: int) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(_flip(SEGMENT.read_bytes(), position))
    batch_start = max(e for e in [0, *BATCH_ENDS] if e <= position)
    # Header-only scans do not read bodies: no error without the CRC check.
    assert len(RecordBatchReader(path).headers()) == 6
    with pytest.raises(SegmentFormatError, match="CRC-32C mismatch") as e:
        RecordBatchReader(path, verify_crc=True).headers()
    assert e.value.path == str(path) and e.value.position == batch_start
    assert str(path) in str(e.value) and f"byte position {batch_start}" in str(e.value)
    with pytest.raises(SegmentFormatError, match="CRC"):
        list(iter_records(path))
    # Recovery mode: stop at the corrupt batch, as Kafka's segment recovery does.
    reader = RecordBatchReader(path, verify_crc=True, strict=False)
    assert len(reader.headers()) == len([e for e in BATCH_ENDS if e <= batch_start])
    assert reader.valid_bytes == batch_start and reader.error is not None
    assert reader.truncated_bytes == len(SEGMENT.read_bytes()) - batch_start


def test_flipped_legacy_byte_is_a_crc_error() -> None:
    headers = RecordBatchReader(MIXED).headers()
    legacy = headers[2]  # gzip-compressed magic 1 wrapper
    data = _flip(MIXED, legacy.position + 30)
    with pytest.raises(SegmentFormatError, match="CRC-32 mismatch") as e:
        RecordBatchReader(data, verify_crc=True).headers()
    assert e.value.position == legacy.position and e.value.path == "<buffer>"


@pytest.mark.parametrize(
    ("length", "match"),
    [(0x7FFFFFF0, "above the maximum"), (-5, "below the minimum"), (10, "below the minimum")],
)
def test_absurd_length(tmp_path: Path, length: int, match: str) -> None:
    data = bytearray(SEGMENT.read_bytes())
    struct.pack_into(">i", data, 3732 + 8, length)  # third batch
    path = tmp_path / "bad.log"
    path.write_bytes(bytes(data))
    with pytest.raises(SegmentFormatError, match=match) as e:
        RecordBatchReader(path).headers()
    assert e.value.position == 3732 and e.value.path == str(path)
    reader = RecordBatchReader(path, strict=False)
    assert len(reader.headers()) == 2 and reader.valid_bytes == 3732


def test_unknown_magic(tmp_path: Path) -> None:
    data = bytearray(SEGMENT.read_bytes())
    data[2076 + 16] = 7
    with pytest.raises(SegmentFormatError, match="unknown magic byte 7") as e:
        RecordBatchReader(bytes(data), name="seg.log").headers()
    assert (e.value.path, e.value.position) == ("seg.log", 2076)


def test_record_count_lie_is_caught_by_decoding() -> None:
    data = bytearray(SEGMENT.read_bytes()[:2076])
    struct.pack_into(">i", data, 57, 40)  # header says 40 records, body holds 37
    (header, view), *_ = RecordBatchReader(bytes(data)).batches()
    with pytest.raises(SegmentFormatError) as e:
        decode_batch(header, view, name="seg.log")
    assert e.value.position == 0 and "seg.log" in str(e.value)


def test_missing_file_is_a_segment_error(tmp_path: Path) -> None:
    with pytest.raises(SegmentFormatError, match="cannot open"):
        RecordBatchReader(tmp_path / "nope.log").headers()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.booleans(), st.booleans())
def test_arbitrary_bytes_only_raise_segment_format_error(
    data: bytes, verify_crc: bool, allow_tail: bool
) -> None:
    try:
        for header, view in RecordBatchReader(
            data, verify_crc=verify_crc, allow_truncated_tail=allow_tail
        ).batches():
            assert header.size_in_bytes == len(view)
            decode_batch(header, view)
    except SegmentFormatError as e:
        assert e.position is not None and e.path == "<buffer>"


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=0, max_value=len(MIXED) - 1),
    st.integers(min_value=1, max_value=255),
    st.booleans(),
)
def test_mutated_real_batches_only_raise_segment_format_error(
    position: int, xor: int, verify_crc: bool
) -> None:
    # Mutations of real mixed-magic data reach deeper than random bytes: valid framing
    # with bad bodies goes to aiokafka, whose failures must come back translated.
    data = bytearray(MIXED)
    data[position] ^= xor
    try:
        for header, view in RecordBatchReader(bytes(data), verify_crc=verify_crc).batches():
            decode_batch(header, view)
    except SegmentFormatError as e:
        assert e.position is not None


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupt_bodies_with_valid_crc_only_raise_segment_format_error(data: st.DataObject) -> None:
    # Re-sealing the CRC after the mutation sends the bad body into aiokafka's decoder.
    buf = bytearray(MIXED)
    batches = RecordBatchReader(MIXED).headers()
    header = data.draw(st.sampled_from([h for h in batches if h.magic == 2]))
    position = data.draw(st.integers(header.position + 21, header.end_position - 1))
    buf[position] ^= data.draw(st.integers(1, 255))
    crc = crc32c.crc32c(bytes(buf[header.position + 21 : header.end_position]))
    struct.pack_into(">I", buf, header.position + 17, crc)
    try:
        for h, view in RecordBatchReader(bytes(buf), verify_crc=True).batches():
            decode_batch(h, view)
    except SegmentFormatError as e:
        assert e.position is not None
