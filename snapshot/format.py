"""Snapshot file format: one self-checking frame around a msgpack body.

Layout (all integers big-endian, like Kafka's)::

    magic            8 bytes   b"RLMMSNAP"
    format_version   uint16    2 (1 is still read)
    body_length      uint64    bytes of msgpack that follow
    body             msgpack   {"partition_count", "applied_offsets", "created_ms", "state"}
    crc              uint32    CRC-32C (Castagnoli) of every byte before it

Versions: the frame and the body map are the same in both; what changed is the
caller's ``state``. Version 2 marks states whose per-partition caches are opaque
encoded blocks (decoded lazily by rlmm), so a reader that knows only version 1
refuses such a file (SnapshotVersionError: a full replay) instead of misreading it.
This module still reads version-1 files (their states are nested lists).

Invariant: ``decode_snapshot`` either returns a Snapshot whose bytes passed the CRC
and whose body has the shape of its version, or raises a SnapshotError subclass naming
the source; it never raises anything else and never allocates more than a small
multiple of its input. The frame (magic, version, length, CRC) is the same for
every format version, so a newer version is told apart from corruption: its CRC
checks out and only then is its version refused with SnapshotVersionError.

The caller's ``state`` is opaque here: it is packed and unpacked by msgpack's C
code in one call each, with no per-item Python work, so a snapshot of a million
cached segments (~54 MB) costs about a second each way. msgpack turns tuples into
lists and bytearrays into bytes; dict keys must be str, int or bytes. Nesting is
bounded by msgpack's C code: the packer refuses more than 1025 levels (body map
included), the unpacker reads at most 1024, so a state exactly 1024 levels deep
encodes but does not decode (SnapshotCorruptError, i.e. a full replay) - far beyond
the few levels of any cache.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import NoReturn, TypeAlias

import crc32c
import msgpack

from snapshot.errors import (
    SnapshotCorruptError,
    SnapshotEncodeError,
    SnapshotInvalidError,
    SnapshotVersionError,
)

MAGIC = b"RLMMSNAP"
FORMAT_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})

_HEADER = struct.Struct(">8sHQ")
_TRAILER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size
TRAILER_SIZE = _TRAILER.size

# Body field names, in the order they are packed: the small fields first so a
# future reader could peek at them without unpacking a large state.
_FIELDS = ("partition_count", "applied_offsets", "created_ms", "state")

# What a state may be made of: what msgpack packs. It packs a tuple as a list and a
# bytearray or memoryview as bytes, so a decoded state holds only lists, dicts, bytes,
# str and scalars (its map keys: the str, int or bytes written).
Packable: TypeAlias = (
    bool
    | int
    | float
    | str
    | bytes
    | bytearray
    | memoryview
    | Sequence["Packable"]
    | Mapping[str, "Packable"]
    | Mapping[int, "Packable"]
    | Mapping[bytes, "Packable"]
    | None
)

# msgpack stores ints up to 64 bits; offsets and timestamps are Kafka int64s.
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, repr=False)
class Snapshot:
    """The applied position of every held metadata partition plus the caller's cache state.

    ``applied_offsets`` maps metadata partition (0 <= p < partition_count) to the last
    offset applied to ``state``; restart replays each partition from ``offset + 1``, and
    a partition absent from the map is replayed from 0. It is stored read-only.
    """

    partition_count: int
    applied_offsets: Mapping[int, int]
    state: Packable
    created_ms: int

    # The state is usually a list, so a Snapshot is not hashable.
    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        problem = _field_problem(self.partition_count, self.applied_offsets, self.created_ms)
        if problem is not None:
            raise SnapshotInvalidError(f"invalid snapshot: {problem}")
        object.__setattr__(self, "applied_offsets", MappingProxyType(dict(self.applied_offsets)))

    def __repr__(self) -> str:
        # The state may hold a million segments: never print it.
        return (
            f"Snapshot(partition_count={self.partition_count}, "
            f"applied_offsets={dict(self.applied_offsets)!r}, "
            f"state=<{type(self.state).__name__}>, created_ms={self.created_ms})"
        )


def _int_in(value: object, low: int, high: int) -> bool:
    """True if ``value`` is an int (not a bool: True is never a count) in [low, high]."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _field_problem(partition_count: object, applied: object, created_ms: object) -> str | None:
    """Describe the first invalid field, or None; O(partitions), never looks at state."""
    if not isinstance(partition_count, int) or not _int_in(partition_count, 1, _INT32_MAX):
        return f"partition_count must be an int in [1, 2**31), got {partition_count!r}"
    if not isinstance(applied, Mapping):
        return f"applied_offsets must be a mapping, got {type(applied).__name__}"
    for partition, offset in applied.items():
        if not _int_in(partition, 0, partition_count - 1):
            return (
                f"applied_offsets has partition {partition!r}, expected an int in "
                f"[0, {partition_count})"
            )
        if not _int_in(offset, 0, _INT64_MAX):
            return f"applied_offsets[{partition}] must be an int64 offset >= 0, got {offset!r}"
    if not _int_in(created_ms, 0, _INT64_MAX):
        return f"created_ms must be an int64 >= 0, got {created_ms!r}"
    return None


def encode_snapshot_parts(snapshot: Snapshot) -> tuple[bytes, memoryview, bytes]:
    """Encode into (header, body, trailer) whose concatenation is the snapshot file.

    The body is a view of msgpack's own buffer, so writing the three parts to a file
    holds a single copy of the body; call ``body.release()`` when done with it.
    """
    packer = msgpack.Packer(autoreset=False, use_bin_type=True)
    body_map = {
        "partition_count": snapshot.partition_count,
        "applied_offsets": dict(snapshot.applied_offsets),
        "created_ms": snapshot.created_ms,
        "state": snapshot.state,
    }
    try:
        packer.pack(body_map)
    except (TypeError, ValueError, OverflowError) as exc:
        # TypeError: unsupported type; OverflowError: int beyond 64 bits;
        # ValueError: nesting deeper than msgpack's recursion limit.
        raise SnapshotEncodeError(
            f"snapshot state is not msgpack-serialisable: {type(exc).__name__}: {exc}"
        ) from exc
    body = packer.getbuffer()
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, body.nbytes)
    crc = crc32c.crc32c(body, value=crc32c.crc32c(header))
    return header, body, _TRAILER.pack(crc)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """The complete snapshot file as bytes (peak memory: two copies of the body)."""
    header, body, trailer = encode_snapshot_parts(snapshot)
    try:
        return b"".join((header, body, trailer))
    finally:
        body.release()


def _checked_body(data: bytes | bytearray | memoryview, source: str) -> memoryview:
    """Check the frame and CRC and return a zero-copy view of the body."""
    view = memoryview(data).cast("B")
    size = view.nbytes
    if size < HEADER_SIZE + TRAILER_SIZE:
        raise SnapshotCorruptError(
            source, f"truncated: {size} bytes, a snapshot has at least {HEADER_SIZE + TRAILER_SIZE}"
        )
    magic, version, body_length = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise SnapshotCorruptError(source, f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    expected = HEADER_SIZE + body_length + TRAILER_SIZE
    if size < expected:
        raise SnapshotCorruptError(
            source, f"truncated: {size} of {expected} bytes (header says body is {body_length})"
        )
    if size > expected:
        raise SnapshotCorruptError(
            source, f"{size - expected} unexpected bytes after the CRC at position {expected}"
        )
    (stored_crc,) = _TRAILER.unpack_from(view, expected - TRAILER_SIZE)
    actual_crc = crc32c.crc32c(view[: expected - TRAILER_SIZE])
    if stored_crc != actual_crc:
        raise SnapshotCorruptError(
            source,
            f"CRC-32C mismatch: stored {stored_crc:#010x}, computed {actual_crc:#010x} "
            f"over {expected - TRAILER_SIZE} bytes",
        )
    if version > FORMAT_VERSION:
        raise SnapshotVersionError(source, version, FORMAT_VERSION)
    if version not in READABLE_VERSIONS:
        raise SnapshotCorruptError(source, f"unknown format version {version}")
    return view[HEADER_SIZE : HEADER_SIZE + body_length]


def verify_snapshot(data: bytes | bytearray | memoryview, source: str = "<bytes>") -> None:
    """Check magic, length, CRC and version without unpacking the body (cheap).

    Raises the same errors as ``decode_snapshot`` for every defect of the frame;
    a body of the wrong shape is only caught by a full decode.
    """
    _checked_body(data, source).release()


def _reject_ext(code: int, data: bytes) -> NoReturn:
    # The format uses no msgpack extension types; one can only come from a foreign writer.
    raise ValueError(f"unexpected msgpack extension type {code} ({len(data)} bytes)")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while msgpack builds a large tree of fresh containers.

    Every allocation of a list or dict counts towards a collection; unpacking a
    million lists otherwise triggers repeated full scans that cost 4-5x the unpack
    itself. Nothing built here is cyclic, so no garbage accumulates meanwhile.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decode_snapshot(data: bytes | bytearray | memoryview, source: str = "<bytes>") -> Snapshot:
    """Parse a snapshot file's bytes; ``source`` (usually the path) names it in errors."""
    body = _checked_body(data, source)
    limit = body.nbytes
    try:
        with _gc_paused():
            # Every msgpack element takes at least one byte, so lengths derived from
            # the body size bound what a forged length prefix can make msgpack allocate.
            obj = msgpack.unpackb(
                body,
                raw=False,
                strict_map_key=False,
                max_str_len=limit,
                max_bin_len=limit,
                max_array_len=limit,
                max_map_len=limit // 2,
                max_ext_len=limit,
                ext_hook=_reject_ext,
            )
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        # ValueError covers FormatError, StackError, ExtraData, bad UTF-8 and
        # incomplete input; TypeError an unhashable (array) map key.
        detail = str(exc) or "malformed msgpack"
        raise SnapshotCorruptError(
            source, f"body is not valid msgpack: {type(exc).__name__}: {detail}"
        ) from exc
    finally:
        body.release()
    return _snapshot_from_body(obj, source)


def _snapshot_from_body(obj: object, source: str) -> Snapshot:
    if not isinstance(obj, dict):
        raise SnapshotCorruptError(source, f"body is a {type(obj).__name__}, expected a map")
    missing = [name for name in _FIELDS if name not in obj]
    if missing:
        raise SnapshotCorruptError(source, f"body lacks field(s) {', '.join(missing)}")
    # Unknown extra keys are ignored: a later minor writer may add optional fields.
    applied = obj["applied_offsets"]
    if not isinstance(applied, dict):
        raise SnapshotCorruptError(
            source, f"applied_offsets is a {type(applied).__name__}, expected a map"
        )
    try:
        return Snapshot(
            partition_count=obj["partition_count"],
            applied_offsets=applied,
            state=obj["state"],
            created_ms=obj["created_ms"],
        )
    except SnapshotInvalidError as exc:
        raise SnapshotCorruptError(source, f"bad body: {exc}") from exc
