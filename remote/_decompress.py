"""Decompression of bytes we did not write, never past a stated limit.

Kafka's codecs (gzip, snappy in the xerial framing or raw, LZ4 frames, zstd) for record
batches, and zstd for Aiven's chunks: ``decompress(codec, data, limit)`` returns the
content, at most ``limit`` bytes, or raises DecompressionError (``limit_exceeded`` when
the content is bigger: a decompression bomb).

Invariant: no output buffer is sized by a claim beyond ``limit``; a buffer sized by a
claim within it (zstd's frame content size, snappy's length preamble, checked against
snappy's largest ratio to the bytes there) is exactly that size, and otherwise a buffer
starts small and grows fourfold only while the decoder fills it, so at most about four
times the real content is ever allocated. Callers translate DecompressionError into
their own typed error naming the object and field.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam

from remote.errors import DecompressionError

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4  # Kafka's codec ids
CODEC_NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
FIRST_GUESS = 1 << 16
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, then int32 version and int32 compatible version
_SNAPPY_MAX_RATIO = 32  # a 3-byte copy element yields at most 64 bytes (about 21x)


def _too_big(limit: int) -> DecompressionError:
    return DecompressionError(f"decompresses to more than {limit} bytes", limit_exceeded=True)


def grow_into(
    decompress_into: Callable[[bytes, bytearray], int],
    data: bytes,
    limit: int,
    declared: int | None = None,
) -> bytearray:
    """Run a cramjam ``decompress_into`` in a buffer that grows (see the module doc)."""
    if declared is not None and declared > limit:
        raise DecompressionError(
            f"declares {declared} bytes, more than {limit}", limit_exceeded=True
        )
    cap = declared if declared is not None else min(limit, max(FIRST_GUESS, 4 * len(data)))
    while True:
        out = bytearray(cap + 1)  # the spare byte tells "exactly cap" from "more than cap"
        try:
            n = decompress_into(data, out)
        except cramjam.DecompressionError as e:
            # Corrupt, or more than cap bytes: grow while the limit allows (a declared
            # size is checked by the decoder itself).
            if declared is None and cap < limit:
                cap = min(limit, 4 * cap)
                continue
            raise DecompressionError(f"not valid within {limit} bytes: {e}") from None
        if n <= cap:
            del out[n:]
            return out
        if cap >= limit:
            raise _too_big(limit)
        cap = min(limit, 4 * cap)


def zstd_content_size(frame: bytes | bytearray | memoryview) -> int | None:
    """The content size a zstd frame header declares, or None (not declared or no frame)."""
    if len(frame) < 5 or bytes(frame[:4]) != _ZSTD_MAGIC:
        return None
    descriptor = frame[4]
    single_segment = descriptor & 0x20
    fcs_size = (0, 2, 4, 8)[descriptor >> 6] or (1 if single_segment else 0)
    if not fcs_size:
        return None
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if len(frame) < at + fcs_size:
        return None
    value = int.from_bytes(frame[at : at + fcs_size], "little")
    return value + 256 if fcs_size == 2 else value


def zstd(data: bytes, limit: int) -> bytearray:
    return grow_into(cramjam.zstd.decompress_into, data, limit, zstd_content_size(data))


def lz4_frame(data: bytes, limit: int) -> bytearray:
    return grow_into(cramjam.lz4.decompress_into, data, limit)


def gzip(data: bytes, limit: int) -> bytearray:
    """One or more gzip members back to back (as Java's GZIPInputStream reads them)."""
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as e:
            raise DecompressionError(f"not gzip: {e}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise _too_big(limit)
        if not d.eof:
            raise DecompressionError("a truncated gzip stream")
        rest = d.unused_data
        if not rest:
            return out


def snappy_raw(data: bytes, limit: int) -> bytearray:
    try:
        declared = cramjam.snappy.decompress_raw_len(data)
    except cramjam.DecompressionError as e:
        raise DecompressionError(f"not snappy: {e}") from None
    if declared > limit:
        raise _too_big(limit)
    if declared > _SNAPPY_MAX_RATIO * len(data) + 64:
        raise DecompressionError(f"declares {declared} bytes, more than {len(data)} bytes hold")
    out = bytearray(declared)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as e:
        raise DecompressionError(f"not snappy: {e}") from None
    if n != declared:
        raise DecompressionError(f"{n} bytes where {declared} were declared")
    return out


def snappy_kafka(data: bytes, limit: int) -> bytearray:
    """Snappy as Kafka clients write it: the xerial block framing, or raw."""
    if not data.startswith(_XERIAL_MAGIC):
        return snappy_raw(data, limit)
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError(f"a truncated xerial block size at byte {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if not 0 <= size <= len(data) - pos:
            raise DecompressionError(f"xerial block of {size} bytes at byte {pos - 4}")
        out += snappy_raw(data[pos : pos + size], limit - len(out))
        pos += size
    return out


_DECODERS: dict[int, Callable[[bytes, int], bytearray]] = {
    GZIP: gzip,
    SNAPPY: snappy_kafka,
    LZ4: lz4_frame,
    ZSTD: zstd,
}


def decompress(codec: int, data: bytes, limit: int) -> bytearray:
    """The content of ``data`` in Kafka codec ``codec`` (1..4), at most ``limit`` bytes."""
    decoder = _DECODERS.get(codec)
    if decoder is None:
        raise DecompressionError(f"unknown codec id {codec}")
    return decoder(data, limit)


__all__ = [
    "CODEC_NAMES",
    "GZIP",
    "LZ4",
    "SNAPPY",
    "ZSTD",
    "decompress",
    "grow_into",
    "gzip",
    "lz4_frame",
    "snappy_kafka",
    "snappy_raw",
    "zstd",
    "zstd_content_size",
]
