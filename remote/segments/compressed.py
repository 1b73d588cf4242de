"""Compressed record batches made safe to hand to aiokafka: decompressed within a bound.

aiokafka decompresses a batch's records whole, with no limit: a few KB of zstd in a
segment would become gigabytes (cramjam aborts the process when the allocation fails).
Every decoder of records in rlmm calls ``bounded_batch`` first.

Invariant: a batch's records never decompress past ``records_limit(compressed size)``:
32 times the compressed bytes, at least ``MIN_RECORDS_LIMIT`` (16 MiB: a batch of
Kafka's default ``message.max.bytes``, 1 MiB, at a ratio of 16) and at most
``MAX_RECORDS_LIMIT`` (128 MiB), so a few KB can never become more than 16 MiB.
A v2 batch comes back with its records decompressed and its codec bits cleared (so
aiokafka decodes it without decompressing; decompressed once, as before); a magic 0/1
wrapper, whose value aiokafka decompresses itself, is checked within the bound first.
Past the bound, or not in its codec, a batch is a SegmentFormatError naming the file
and the batch's byte position.
"""

from __future__ import annotations

import struct

from remote import _decompress
from remote.errors import DecompressionError, SegmentFormatError
from remote.segments.batch import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    V2_ATTRIBUTES_OFFSET,
    V2_HEADER_SIZE,
    RecordBatchHeader,
)

MIN_RECORDS_LIMIT = 16 << 20
MAX_RECORDS_LIMIT = 128 << 20
RECORDS_RATIO = 32
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def records_limit(compressed: int) -> int:
    """The most bytes the records of a batch of ``compressed`` record bytes may hold."""
    return min(MAX_RECORDS_LIMIT, max(MIN_RECORDS_LIMIT, RECORDS_RATIO * compressed))


def _fail(header: RecordBatchHeader, name: str, e: DecompressionError) -> SegmentFormatError:
    codec = _decompress.CODEC_NAMES.get(header.compression_type, str(header.compression_type))
    what = " (a decompression bomb)" if e.limit_exceeded else ""
    return SegmentFormatError(
        f"{name}: the {codec} records of the batch at base offset {header.base_offset}: {e}"
        f"{what} at byte position {header.position}",
        name,
        header.position,
    )


def bounded_batch(
    header: RecordBatchHeader, data: memoryview | bytes, name: str = "<buffer>"
) -> memoryview | bytes:
    """``data`` (the whole batch) as aiokafka may decode it: itself when uncompressed or
    a legacy wrapper within the bound, else the v2 batch with its records decompressed."""
    codec = header.compression_type
    if not codec:
        return data
    if header.magic < 2:
        _check_legacy(header, data, name)
        return data
    if codec not in _decompress.CODEC_NAMES:
        return data  # aiokafka's UnsupportedCodecError says which
    compressed = bytes(data[V2_HEADER_SIZE:])
    try:
        records = _decompress.decompress(codec, compressed, records_limit(len(compressed)))
    except DecompressionError as e:
        raise _fail(header, name, e) from None
    records[:0] = data[:V2_HEADER_SIZE]  # one move, no second copy of the records
    _I32.pack_into(records, 8, V2_HEADER_SIZE - LOG_OVERHEAD + len(records) - V2_HEADER_SIZE)
    _I16.pack_into(records, V2_ATTRIBUTES_OFFSET, header.attributes & ~COMPRESSION_CODEC_MASK)
    return memoryview(records)


def _check_legacy(header: RecordBatchHeader, data: memoryview | bytes, name: str) -> None:
    """A magic 0/1 wrapper: crc, magic, attributes, [timestamp], key, value (compressed)."""
    pos = LOG_OVERHEAD + 6 + (8 if header.magic == 1 else 0)
    try:
        (key_length,) = _I32.unpack_from(data, pos)
        pos += 4 + max(key_length, 0)
        (value_length,) = _I32.unpack_from(data, pos)
    except struct.error:
        return  # aiokafka's own checks refuse the framing
    pos += 4
    value = bytes(data[pos : pos + max(value_length, 0)])
    if header.compression_type not in _decompress.CODEC_NAMES or not value:
        return
    try:
        _decompress.decompress(header.compression_type, value, records_limit(len(value)))
    except DecompressionError as e:
        raise _fail(header, name, e) from None


__all__ = [
    "MAX_RECORDS_LIMIT",
    "MIN_RECORDS_LIMIT",
    "RECORDS_RATIO",
    "bounded_batch",
    "records_limit",
]
