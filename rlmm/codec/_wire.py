"""Primitives of Kafka's flexible-version wire encoding, for rlmm.codec.serde.

Invariant: every reader takes ``(data, pos)`` and returns the value and the position just
after it, or raises :class:`CodecError` naming the field and the byte position; none reads
past ``len(data)``, allocates more than the input holds, or raises another exception type.

Encoding rules (Kafka ``ByteUtils`` / generated message code): unsigned varints are
little-endian base-128 with at most 5 bytes (a 32-bit value); compact lengths are written
as ``len + 1`` with 0 meaning null; a tagged-field block is ``uvarint count`` followed by
``uvarint tag, uvarint size, size bytes`` per field.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Final

from rlmm import _fast_paths
from rlmm.errors import CodecError

MAX_UVARINT_BYTES: Final = 5
# Kafka's generated readers refuse string fields longer than this (Short.MAX_VALUE).
MAX_STRING_LENGTH: Final = 0x7FFF

# Single-byte uvarints are the common case (small lengths, counts, tags): precomputed.
_SMALL_UVARINTS: Final = tuple(bytes((i,)) for i in range(0x80))


def encode_uvarint(value: int) -> bytes:
    """Kafka's unsigned varint of ``value`` (0 <= value < 2**32)."""
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    if value > 0xFFFF_FFFF:
        raise CodecError(f"unsigned varint {value} does not fit 32 bits")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Read one unsigned varint (at most 5 bytes, value < 2**32) of field ``what``."""
    start = pos
    end = len(data)
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise CodecError(f"truncated varint {what} at byte {start} ({end} bytes in record)")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift >= 7 * MAX_UVARINT_BYTES:
            raise CodecError(f"varint {what} at byte {start} is longer than 5 bytes")
    if value > 0xFFFF_FFFF:
        raise CodecError(f"varint {what} at byte {start} does not fit 32 bits")
    return value, pos


def read_compact_length(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Read a compact length: -1 for null, else the length, checked against the buffer."""
    start = pos
    if pos < len(data) and data[pos] < 0x80:  # one-byte fast path
        raw = data[pos]
        pos += 1
    else:
        raw, pos = read_uvarint(data, pos, what)
    length = raw - 1
    if length > len(data) - pos:
        raise CodecError(
            f"{what} at byte {start} claims {length} bytes but only {len(data) - pos} remain"
        )
    return length, pos


def read_compact_string(data: bytes, pos: int, what: str) -> tuple[str, int]:
    """Read a non-nullable compact UTF-8 string (Kafka's ``string`` in flexible versions)."""
    start = pos
    if pos < len(data) and data[pos] < 0x80:  # one-byte length: inline fast path
        length = data[pos] - 1
        pos += 1
        if length > len(data) - pos:
            raise CodecError(
                f"{what} at byte {start} claims {length} bytes but only {len(data) - pos} remain"
            )
    else:
        length, pos = read_compact_length(data, pos, what)
    if length < 0:
        raise CodecError(f"non-nullable string {what} is null at byte {start}")
    if length > MAX_STRING_LENGTH:
        raise CodecError(f"string {what} at byte {start} is {length} bytes (Kafka max 32767)")
    end = pos + length
    try:
        return data[pos:end].decode("utf-8"), end
    except UnicodeDecodeError as e:
        raise CodecError(f"string {what} at byte {start} is not valid UTF-8: {e.reason}") from e


def read_compact_nullable_bytes(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """Read nullable compact bytes (None for the null marker)."""
    if pos < len(data) and data[pos] < 0x80:  # one-byte length: inline fast path
        length = data[pos] - 1
        if length < 0:
            return None, pos + 1
        end = pos + 1 + length
        if end <= len(data):
            return data[pos + 1 : end], end
    length, pos = read_compact_length(data, pos, what)
    if length < 0:
        return None, pos
    end = pos + length
    return data[pos:end], end


def read_tagged_count(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Read the field count that opens a tagged-field block, checked against the buffer."""
    start = pos
    count, pos = read_uvarint(data, pos, f"tagged field count of {what}")
    # Each tagged field takes at least 2 bytes (tag, size): refuse counts the buffer cannot hold.
    if count > (len(data) - pos) // 2:
        raise CodecError(
            f"tagged field count {count} of {what} at byte {start} exceeds the remaining bytes"
        )
    return count, pos


def read_tagged_field_header(data: bytes, pos: int, what: str) -> tuple[int, int, int]:
    """Read one tagged field's ``tag, size``; return ``(tag, size, position of its data)``."""
    field_start = pos
    tag, pos = read_uvarint(data, pos, f"tag in {what}")
    size, pos = read_uvarint(data, pos, f"size of tag {tag} in {what}")
    if size > len(data) - pos:
        raise CodecError(
            f"tagged field {tag} of {what} at byte {field_start} claims {size} bytes "
            f"but only {len(data) - pos} remain"
        )
    return tag, size, pos


def skip_tagged_fields(data: bytes, pos: int, what: str) -> int:
    """Skip a tagged-field block whose fields are all unknown; return the position after it."""
    count, pos = read_tagged_count(data, pos, what)
    for _ in range(count):
        _tag, size, pos = read_tagged_field_header(data, pos, what)
        pos += size
    return pos


def _fast_uuid_factory() -> tuple[Callable[[int], uuid.UUID], bool]:
    """A uuid.UUID builder from a 128-bit int that skips UUID.__init__'s argument parsing.

    uuid.UUID is immutable and stores only ``int`` and ``is_safe`` (CPython's __slots__);
    filling those two slots is what ``UUID(int=...)`` ends with. If a Python version
    stores anything else, or ``RLMM_NO_FAST_PATHS`` is set, fall back to the public
    constructor (the test suite asserts which one loaded).
    """
    new = object.__new__
    set_slot = object.__setattr__
    unknown = uuid.SafeUUID.unknown
    cls = uuid.UUID

    def fast(value: int) -> uuid.UUID:
        u: uuid.UUID = new(cls)
        set_slot(u, "int", value)
        set_slot(u, "is_safe", unknown)
        return u

    def public(value: int) -> uuid.UUID:
        return cls(int=value)

    if not _fast_paths.ALLOWED:
        return public, False
    try:
        if set(getattr(cls, "__slots__", ())) == {"int", "is_safe", "__weakref__"}:
            probe = 0x0123456789ABCDEF_FEDCBA9876543210
            u = fast(probe)
            ref = public(probe)
            if u == ref and hash(u) == hash(ref) and str(u) == str(ref) and u.bytes == ref.bytes:
                return fast, True
    except (AttributeError, TypeError):  # pragma: no cover - depends on the Python version
        pass
    return public, False  # pragma: no cover - depends on the Python version


uuid_from_int, FAST_UUID = _fast_uuid_factory()
"""``uuid_from_int(value)`` builds a uuid.UUID from its 128-bit int (fast path when available)."""
