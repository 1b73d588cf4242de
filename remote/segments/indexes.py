"""Kafka's per-segment index files: ``.index``, ``.timeindex`` and ``.txnindex``.

Job: parse and encode the three binary indexes that sit beside a ``.log`` segment:
- offset index: 8-byte entries (relative offset int32, position int32);
- time index: 12-byte entries (timestamp int64, relative offset int32);
- transaction index: 34-byte aborted-transaction entries (version int16 = 0,
  producer id int64, first offset int64, last offset int64, last stable offset int64).

Invariant: parsed entries carry absolute offsets and are in the order Kafka keeps
them (offsets and positions strictly increasing, timestamps never decreasing); a file
whose size is not a whole number of entries, or whose entries go backwards, gives
SegmentFormatError naming the file and byte position. The zero-filled tail Kafka
preallocates in an active segment's index is not an entry and is ignored.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from remote.errors import SegmentFormatError

OFFSET_INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_VERSION = 0

Data = bytes | bytearray | memoryview | str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class OffsetIndexEntry:
    """``offset`` (absolute) is the last offset of the batch starting at ``position``."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    """Max timestamp seen so far and the (absolute) offset of the batch holding it."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction of a producer, recorded in the segment holding its marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = TXN_INDEX_VERSION


def _load(data: Data) -> tuple[bytes | bytearray | memoryview, str]:
    if isinstance(data, bytes | bytearray | memoryview):
        return data, "<buffer>"
    name = os.fspath(data)
    try:
        return Path(name).read_bytes(), name
    except OSError as e:
        raise SegmentFormatError(f"{name}: cannot read: {e}", name, 0) from e


def _entries(buf: bytes | bytearray | memoryview, size: int, name: str, kind: str) -> int:
    if len(buf) % size:
        raise SegmentFormatError(
            f"{name}: {kind} of {len(buf)} bytes is not a whole number of {size}-byte entries"
            f" (trailing bytes at byte position {len(buf) - len(buf) % size})",
            name,
            len(buf) - len(buf) % size,
        )
    return len(buf) // size


def read_offset_index(
    data: Data, base_offset: int, *, name: str | None = None
) -> list[OffsetIndexEntry]:
    """Entries of an offset index (``.index``) of the segment at ``base_offset``."""
    buf, src = _load(data)
    name = name or src
    out: list[OffsetIndexEntry] = []
    for i in range(_entries(buf, OFFSET_INDEX_ENTRY.size, name, "offset index")):
        rel, pos = OFFSET_INDEX_ENTRY.unpack_from(buf, i * OFFSET_INDEX_ENTRY.size)
        if i and rel == 0 and pos == 0:
            break  # preallocated, never written
        if (
            rel < 0
            or pos < 0
            or (out and (base_offset + rel <= out[-1].offset or pos <= out[-1].position))
        ):
            raise SegmentFormatError(
                f"{name}: offset index entry {i} (relative offset {rel}, position {pos}) is "
                f"negative or not after the previous one, at byte position "
                f"{i * OFFSET_INDEX_ENTRY.size}",
                name,
                i * OFFSET_INDEX_ENTRY.size,
            )
        out.append(OffsetIndexEntry(base_offset + rel, pos))
    return out


def last_offset_index_entry(
    path: str | os.PathLike[str], base_offset: int
) -> OffsetIndexEntry | None:
    """The last entry written in the offset index file at ``path`` (None: none yet),
    reading O(log n) entries instead of the file: Kafka preallocates an active
    segment's index with zeros (``segment.index.bytes``, 10 MiB by default), and the
    written entries are a prefix of it (entry 0 may be ``(0, 0)``). Bytes the broker
    cut meanwhile (it trims the index at a roll) count as not written."""
    name = os.fspath(path)
    size = OFFSET_INDEX_ENTRY.size
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError as e:
        raise SegmentFormatError(f"{name}: cannot read: {e}", name, 0) from e
    try:
        count = os.fstat(fd).st_size // size

        def written(i: int) -> tuple[int, int] | None:
            raw = os.pread(fd, size, i * size)
            if len(raw) < size:
                return None
            rel, pos = OFFSET_INDEX_ENTRY.unpack(raw)
            return None if i and rel == 0 and pos == 0 else (rel, pos)

        lo, hi = 0, count  # entries [0, lo) are written, [hi, count) are not
        while lo < hi:
            mid = (lo + hi) // 2
            if written(mid) is None:
                hi = mid
            else:
                lo = mid + 1
        last = written(lo - 1) if lo else None
    finally:
        os.close(fd)
    return None if last is None else OffsetIndexEntry(base_offset + last[0], last[1])


def read_time_index(
    data: Data, base_offset: int, *, name: str | None = None
) -> list[TimeIndexEntry]:
    """Entries of a time index (``.timeindex``) of the segment at ``base_offset``."""
    buf, src = _load(data)
    name = name or src
    out: list[TimeIndexEntry] = []
    for i in range(_entries(buf, TIME_INDEX_ENTRY.size, name, "time index")):
        ts, rel = TIME_INDEX_ENTRY.unpack_from(buf, i * TIME_INDEX_ENTRY.size)
        if i and ts == 0 and rel == 0:
            break  # preallocated, never written
        if rel < 0 or (out and (ts < out[-1].timestamp or base_offset + rel < out[-1].offset)):
            raise SegmentFormatError(
                f"{name}: time index entry {i} (timestamp {ts}, relative offset {rel}) goes "
                f"backwards at byte position {i * TIME_INDEX_ENTRY.size}",
                name,
                i * TIME_INDEX_ENTRY.size,
            )
        out.append(TimeIndexEntry(ts, base_offset + rel))
    return out


def read_txn_index(data: Data, *, name: str | None = None) -> list[AbortedTxn]:
    """Aborted transactions of a transaction index (``.txnindex``)."""
    buf, src = _load(data)
    name = name or src
    out: list[AbortedTxn] = []
    for i in range(_entries(buf, TXN_INDEX_ENTRY.size, name, "transaction index")):
        version, pid, first, last, lso = TXN_INDEX_ENTRY.unpack_from(buf, i * TXN_INDEX_ENTRY.size)
        if version != TXN_INDEX_VERSION or first < 0 or last < first:
            raise SegmentFormatError(
                f"{name}: transaction index entry {i} (version {version}, producer {pid}, "
                f"offsets {first}..{last}) is invalid at byte position "
                f"{i * TXN_INDEX_ENTRY.size}",
                name,
                i * TXN_INDEX_ENTRY.size,
            )
        out.append(AbortedTxn(pid, first, last, lso, version))
    return out


def encode_offset_index(entries: Iterable[OffsetIndexEntry], base_offset: int) -> bytes:
    return b"".join(OFFSET_INDEX_ENTRY.pack(e.offset - base_offset, e.position) for e in entries)


def encode_time_index(entries: Iterable[TimeIndexEntry], base_offset: int) -> bytes:
    return b"".join(TIME_INDEX_ENTRY.pack(e.timestamp, e.offset - base_offset) for e in entries)


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(
        TXN_INDEX_ENTRY.pack(
            e.version, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
        )
        for e in entries
    )


def lookup_offset(entries: list[OffsetIndexEntry], target: int) -> int:
    """File position to start scanning for ``target`` (Kafka's lookup: largest entry ≤ target)."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].offset <= target:
            lo = mid + 1
        else:
            hi = mid
    return entries[lo - 1].position if lo else 0


__all__ = [
    "AbortedTxn",
    "OffsetIndexEntry",
    "TimeIndexEntry",
    "encode_offset_index",
    "encode_time_index",
    "encode_txn_index",
    "last_offset_index_entry",
    "lookup_offset",
    "read_offset_index",
    "read_time_index",
    "read_txn_index",
]
