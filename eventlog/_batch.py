"""Kafka RecordBatch v2 framing for the file log: build, check and decode one batch.

The record encoding itself is aiokafka's (``DefaultRecordBatchBuilder`` to build,
``DefaultRecordBatch`` to validate the CRC-32C and decode); this module only adds
what a log segment needs around it: the real base offset (the builder always writes
0; the field sits outside the CRC'd region, so patching it keeps the CRC valid) and
a cheap header parse so scans can walk a file batch by batch.

Invariant: ``check_batch`` accepts a slice only if its framing, magic, base offset,
record count and CRC-32C all match, so a decoded batch is exactly what was written.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

MAGIC = 2
# BaseOffset(8) + Length(4): the bytes in front of the batch's own length.
LOG_OVERHEAD = 12
# Full v2 batch header, records count included (aiokafka's HEADER_STRUCT).
HEADER_SIZE = 61
# The smallest legal value of the Length field (a header with zero records).
MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD

_BASE_AND_LENGTH = struct.Struct(">qi")
_MAGIC_AT = 16
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_AT = 57
_BASE_OFFSET = struct.Struct(">q")
# The builder refuses a record that would grow the batch past batch_size; every
# request must fit in one batch (append_batch is atomic), so the cap is the format's.
_UNBOUNDED = 2**31 - 1
_NO_PRODUCER = -1


class BadBatchError(Exception):
    """Internal: a batch failed a check; ``reason`` says which. Callers translate it."""

    def __init__(self, reason: str, total_size: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.total_size = total_size


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Where a checked batch sits: its offsets and its size on disk."""

    base_offset: int
    last_offset: int
    size: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def encode_batch(
    base_offset: int, records: Sequence[tuple[bytes | None, bytes]], timestamp_ms: int
) -> bytes:
    """One RecordBatch v2 (uncompressed, CRC-32C) holding ``records`` from ``base_offset``."""
    builder = DefaultRecordBatchBuilder(
        MAGIC, 0, 0, _NO_PRODUCER, _NO_PRODUCER, _NO_PRODUCER, _UNBOUNDED
    )
    for delta, (key, value) in enumerate(records):
        if builder.append(delta, timestamp_ms, key, value, []) is None:
            raise BadBatchError(f"record {delta} does not fit in one batch (2 GiB cap)")
    buffer = builder.build()
    _BASE_OFFSET.pack_into(buffer, 0, base_offset)
    return bytes(buffer)


def peek_size(buffer: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Total on-disk size of the batch at ``pos``, or None if the 12-byte prefix is cut.

    Raises BadBatchError when the Length field is impossible (then the bytes cannot be a
    batch, torn or not: a caller deciding how far to skip needs that distinction).
    """
    if len(buffer) - pos < LOG_OVERHEAD:
        return None
    _, length = _BASE_AND_LENGTH.unpack_from(buffer, pos)
    if length < MIN_LENGTH:
        raise BadBatchError(f"batch length {length} below the v2 minimum {MIN_LENGTH}")
    return LOG_OVERHEAD + length


def check_batch(
    buffer: bytes | bytearray | memoryview,
    pos: int,
    expected_base: int | None,
    *,
    verify_crc: bool = True,
) -> BatchInfo | None:
    """Check the batch at ``pos``; None if it is not wholly inside ``buffer`` yet."""
    size = peek_size(buffer, pos)
    if size is None or len(buffer) - pos < size:
        return None
    base_offset, _ = _BASE_AND_LENGTH.unpack_from(buffer, pos)
    magic = buffer[pos + _MAGIC_AT]
    if magic != MAGIC:
        raise BadBatchError(f"magic {magic} (expected {MAGIC})", size)
    (delta,) = _LAST_OFFSET_DELTA.unpack_from(buffer, pos + _LAST_OFFSET_DELTA_AT)
    (count,) = _RECORD_COUNT.unpack_from(buffer, pos + _RECORD_COUNT_AT)
    # Our batches are dense: count == last_offset_delta + 1 and never empty.
    if delta < 0 or count != delta + 1:
        raise BadBatchError(f"record count {count} != last offset delta {delta} + 1", size)
    if expected_base is not None and base_offset != expected_base:
        raise BadBatchError(f"base offset {base_offset} (expected {expected_base})", size)
    if verify_crc and not DefaultRecordBatch(bytes(buffer[pos : pos + size])).validate_crc():
        raise BadBatchError("CRC-32C mismatch", size)
    return BatchInfo(base_offset, base_offset + delta, size)


def decode_batch(data: bytes) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every record of one framed batch (a null value reads as b"").

    The CRC-32C is verified here, on the same object that decodes, before iteration.
    """
    batch = DefaultRecordBatch(data)
    if not batch.validate_crc():
        raise BadBatchError("CRC-32C mismatch", len(data))
    try:
        return [(record.offset, record.value or b"") for record in batch]
    except CorruptRecordException as e:
        raise BadBatchError(f"record structure: {e}") from e
