"""One user partition's cache as a self-contained encoded block (for lazy snapshot restore).

A block (version 4) is the cache's packed records and columns, as they are held in memory::

    b"RLC4" | header length (u32 LE) | msgpack header | zero padding to 8 | columns
    header:  [topic_id (16 bytes), partition, rows, epoch pairs, dead rows,
              total_size_bytes, byte order, [[row, custom_metadata], ...],
              [[epoch, index length, highest, size_bytes, [unreferenced rows]], ...]]
    columns: the SegmentColumns buffers (``raw_columns`` order: 64-byte little-endian
             records, then the epoch pairs as int64), then per epoch its ``starts`` and
             ``ends`` (int64), then per epoch its ``rows`` (int32)

so decoding is no more than pointing memoryviews at the bytes (the cache reads them in
place until its first change) and a restored partition's first read costs
microseconds, whatever its size. Older blocks still decode, into the same records:
version 3 (one column per field, written before the records; same header) and version
2 (msgpack lists of segments, written before the cache was columnar).

Invariant: the state ``decode_block`` returns for ``encode_block``'s bytes of a cache has
that cache's fingerprint; a block that is not a consistent cache of the partition raises
BlockError and builds nothing. This module reads a cache's public state and returns a
new :class:`CacheState`; it never writes a cache (the cache adopts what it returns).
Blocks come from CRC-checked snapshot files, but a shared bucket lets anyone write one:
every length and index a read follows (columns, epoch pairs, per-epoch rows, custom
metadata rows) is checked against the block before it is used, so reads stay in range;
other forged values (offsets, sizes) are trusted, as they only mislead.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable
from typing import Final, Literal, TypeAlias, TypeGuard

import msgpack

from rlmm.cache._columns import (
    DEAD,
    FAST_OBJECTS,
    NATIVE,
    STATE_MASK,
    TAIL,
    TXN_EMPTY,
    SegmentColumns,
)
from rlmm.cache._custom_column import CustomMetadataColumn
from rlmm.cache._state import CacheState, RemoteLogLeaderEpochState, SegmentSource
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

BLOCK_VERSION: Final = 4
MAGIC: Final = b"RLC4"
MAGIC_V3: Final = b"RLC3"
_PREFIX: Final = struct.Struct("<4sI")
LEGACY_BLOCK_VERSION: Final = 2
FAST_BLOCKS: Final = FAST_OBJECTS  # decoding builds no objects; reads use this path


class BlockError(ValueError):
    """The bytes are not a consistent block of the expected partition."""


# One segment in snapshot format 1 and block version 2: uuid bytes, start offset, end
# offset, max timestamp, broker, event timestamp, size, [epoch, start offset, ...],
# state, custom metadata, txn index empty. Written as this tuple, read back from msgpack
# as a list of the same fields (segment_fields takes either).
SegmentFields: TypeAlias = tuple[
    bytes, int, int, int, int, int, int, list[int], int, bytes | None, bool
]


def segment_to_state(m: RemoteLogSegmentMetadata) -> SegmentFields:
    """msgpack-ready fields of one segment (snapshot format 1 and block version 2)."""
    epochs: list[int] = []
    for epoch, start in m.segment_leader_epochs.items():
        epochs += (epoch, start)
    return (
        m.remote_log_segment_id.id.bytes,
        m.start_offset,
        m.end_offset,
        m.max_timestamp_ms,
        m.broker_id,
        m.event_timestamp_ms,
        m.segment_size_in_bytes,
        epochs,
        int(m.state),
        m.custom_metadata,
        m.txn_index_empty,
    )


def is_fields(value: object) -> TypeGuard[list[object] | tuple[object, ...]]:
    """A record of a snapshot state: a tuple as written, a list as msgpack reads it."""
    return isinstance(value, (list, tuple))


def is_ints(value: object) -> TypeGuard[list[int]]:
    # type(), not isinstance: msgpack gives a bool for true/false, never for a number.
    return isinstance(value, list) and all(type(v) is int for v in value)


def is_bytes_list(value: object) -> TypeGuard[list[bytes]]:
    return isinstance(value, list) and all(isinstance(v, bytes) for v in value)


def segment_fields(item: object) -> SegmentFields:
    """:func:`segment_to_state`'s fields of ``item`` (its tuple, or the list msgpack
    gives back for one); ValueError if it is not such a record."""
    if not is_fields(item) or len(item) != 11:
        raise ValueError(f"a segment is {type(item).__name__}, not 11 fields")
    raw, start, end, max_ts, broker, event_ts, size, flat, state, custom, txn = item
    if not (
        isinstance(raw, bytes)
        and type(start) is int
        and type(end) is int
        and type(max_ts) is int
        and type(broker) is int
        and type(event_ts) is int
        and type(size) is int
        and is_ints(flat)
        and type(state) is int
        and (custom is None or isinstance(custom, bytes))
        and isinstance(txn, int)
    ):
        raise ValueError("a segment's fields are of the wrong types")
    return raw, start, end, max_ts, broker, event_ts, size, flat, state, custom, bool(txn)


def load_rows(cols: SegmentColumns, items: Iterable[SegmentFields]) -> None:
    """Append :func:`segment_to_state` records as rows, in order (row i = items[i])."""
    for raw, start, end, max_ts, broker, event_ts, size, flat, state, custom, txn in items:
        cols.append_raw(raw, (start, end, max_ts, broker, event_ts, size), flat, state, custom, txn)


# ---- version 4 -------------------------------------------------------------------------------


def _pad(n: int) -> int:
    return -n % 8


def encode_block(
    tp: TopicIdPartition,
    cols: SegmentColumns,
    epoch_states: dict[int, RemoteLogLeaderEpochState],
    total_size_bytes: int,
) -> bytes:
    """The version-4 block of a partition's state (a cache's public fields)."""
    epochs = list(epoch_states.items())
    header = [
        tp.topic_id.bytes,
        tp.partition,
        len(cols),
        cols.pairs,
        cols.dead,
        total_size_bytes,
        NATIVE,
        sorted(cols.custom.items()),
        [
            [epoch, len(st.starts), st.highest_offset, st.size_bytes, sorted(st.unreferenced_rows)]
            for epoch, st in epochs
        ],
    ]
    head: bytes = msgpack.packb(header, use_bin_type=True)
    parts: list[bytes | bytearray | memoryview | array[int]] = [
        _PREFIX.pack(MAGIC, len(head)),
        head,
    ]
    at = _PREFIX.size + len(head)
    parts.append(bytes(_pad(at)))
    at += _pad(at)
    for column in cols.raw_columns():
        parts.append(column)
        at += memoryview(column).nbytes
    parts.append(bytes(_pad(at)))
    for _, st in epochs:
        parts += (st.starts, st.ends)
    parts += [st.rows for _, st in epochs]
    return b"".join(parts)


def split_block(data: bytes) -> tuple[list[object], bytes]:
    """(header, the bytes after it) of a version-4 (or 3) block: for tools and tests."""
    magic, length = _PREFIX.unpack_from(data)
    if magic not in (MAGIC, MAGIC_V3):
        raise BlockError("not a version-4 cache block")
    end = _PREFIX.size + length
    header = msgpack.unpackb(data[_PREFIX.size : end], raw=False)
    if not isinstance(header, list):
        raise BlockError(f"the block's header is a {type(header).__name__}, not a list")
    return header, data[end + _pad(end) :]


def decode_v4(owner: SegmentSource, data: bytes, check: bool = True) -> CacheState:
    """The state of version-4 ``data``, as views of it; ValueError-family if bad.

    A version-3 block is read into owned records instead (the cache re-encodes it).
    ``owner`` is the cache that will adopt the state: its partition, and what its epoch
    states build objects through.
    """
    magic, length = _PREFIX.unpack_from(data)
    if magic not in (MAGIC, MAGIC_V3):
        raise BlockError("not a cache block")
    v3 = magic == MAGIC_V3
    head_end = _PREFIX.size + length
    limit = len(data)
    header = msgpack.unpackb(
        data[_PREFIX.size : head_end],
        raw=False,
        max_str_len=limit,
        max_bin_len=limit,
        max_array_len=limit,
        max_map_len=limit // 2,
        max_ext_len=0,
    )
    topic_id, partition, rows, flat, dead, total, order, custom, epochs_state = header
    tp = owner.topic_id_partition
    if topic_id != tp.topic_id.bytes or partition != tp.partition:
        raise BlockError(f"the block holds another partition (partition {partition!r})")
    swap = order != NATIVE
    view = memoryview(data)
    pos = head_end + _pad(head_end)
    if v3:
        cols, pos = _v3_columns(rows, flat, view, pos, swap)
    else:
        cols, pos = SegmentColumns.from_buffers(rows, flat, view, pos, swap)
    copy = swap or v3  # the index too: a cache owns all or none of its buffers
    pos += _pad(pos)
    cols.dead = dead
    cols.custom = _custom_column(custom, rows)
    epochs: dict[int, RemoteLogLeaderEpochState] = {}
    lengths = [e[1] for e in epochs_state]
    if pos + 20 * sum(lengths) != len(data):
        raise BlockError(f"{len(data)} bytes, not what the header describes")
    starts_ends: list[tuple[array[int] | memoryview, array[int] | memoryview]] = []
    for n in lengths:
        pair = []
        for _ in range(2):
            pair.append(_column(view[pos : pos + 8 * n], "q", copy, swap))
            pos += 8 * n
        starts_ends.append((pair[0], pair[1]))
    for (epoch, n, highest, size, unreferenced), (starts, ends) in zip(
        epochs_state, starts_ends, strict=True
    ):
        st = RemoteLogLeaderEpochState(owner)
        st.starts, st.ends = starts, ends
        st.rows = _column(view[pos : pos + 4 * n], "i", copy, swap)
        pos += 4 * n
        st.unreferenced_rows = set(unreferenced)
        st.highest_offset = highest
        st.size_bytes = size
        if check and (
            (n and not 0 <= min(st.rows) <= max(st.rows) < rows)
            or (unreferenced and not 0 <= min(unreferenced) <= max(unreferenced) < rows)
        ):
            raise BlockError(f"epoch {epoch}: a segment index out of range")
        epochs[epoch] = st
    if check:
        if total != cols.total_size():
            raise BlockError(f"total size {total!r} is not the sum of the segments' sizes")
        # A negative first field is an inline epoch; the others index the pairs, and
        # only a row without pairs may point at their end (reads index eps[first]).
        firsts = cols.firsts()
        if rows and max(firsts) >= flat:
            for row, first in enumerate(firsts):
                if first >= flat and cols.pair_bounds(row) != (first, first):
                    raise BlockError(f"segment {row}: leader epoch index {first} out of range")
    return CacheState(cols, epochs, total, None if v3 else data)


def _custom_column(pairs: object, rows: int) -> CustomMetadataColumn:
    """The header's ``[[row, custom metadata], ...]`` as a column; BlockError unless each
    is a row of the block with bytes (checked before anything is sized by a row)."""
    column = CustomMetadataColumn()
    if not isinstance(pairs, list):
        raise BlockError(f"custom metadata is a {type(pairs).__name__}, not a list")
    for pair in pairs:
        row, value = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
        if type(row) is not int or not 0 <= row < rows:
            raise BlockError(f"custom metadata of segment {row!r}: not a segment of the block")
        if not isinstance(value, bytes):
            raise BlockError(f"custom metadata of segment {row}: not bytes")
        column.set(row, value)
    return column


# The item codes of the block's columns: all integers.
_Code: TypeAlias = Literal["B", "i", "q"]


def _column(view: memoryview, code: _Code, copy: bool, swap: bool) -> array[int] | memoryview:
    """A view of ``view`` as ``code`` items, or (``copy``) an owned array, byte-swapped if asked."""
    if not copy:
        return view.cast(code)
    return _owned_column(view, code, swap)


def _owned_column(view: memoryview, code: _Code, swap: bool) -> array[int]:
    """``view``'s bytes as an array of ``code`` items, byte-swapped if asked."""
    owned = array(code, bytes(view))
    if swap:
        owned.byteswap()
    return owned


# ---- version 3 (one column per field) --------------------------------------------------------

_V3_COLUMNS: Final[tuple[tuple[str, _Code, int], ...]] = (
    ("uuids", "B", 16),
    ("start", "q", 1),
    ("end", "q", 1),
    ("max_ts", "q", 1),
    ("event_ts", "q", 1),
    ("ep_start", "q", 0),
    ("size", "i", 1),
    ("broker", "i", 1),
    ("ep_first", "i", 1),
    ("ep_epoch", "i", 0),
    ("flags", "B", 1),
)


def _v3_columns(
    rows: int, flat: int, view: memoryview, pos: int, swap: bool
) -> tuple[SegmentColumns, int]:
    """The records of a version-3 block's columns (copied: read once, after an upgrade)."""
    c: dict[str, array[int]] = {}
    for name, code, per_row in _V3_COLUMNS:
        count = per_row * rows if per_row else flat
        width = array(code).itemsize * count
        if pos + width > len(view):
            raise ValueError(f"column {name} runs past the end of the block")
        c[name] = _owned_column(view[pos : pos + width], code, swap and code != "B")
        pos += width
    cols = SegmentColumns()
    uuids, flags = bytes(c["uuids"]), c["flags"]
    bounds = [*c["ep_first"], flat]
    ep_epoch, ep_start = c["ep_epoch"], c["ep_start"]
    for r in range(rows):
        a, b = bounds[r], bounds[r + 1]
        pairs: list[int] = []
        for epoch, start in zip(ep_epoch[a:b], ep_start[a:b], strict=True):
            pairs += (epoch, start)
        values = (
            c["start"][r],
            c["end"][r],
            c["max_ts"][r],
            c["broker"][r],
            c["event_ts"][r],
            c["size"][r],
        )
        state, txn = flags[r] & STATE_MASK, bool(flags[r] & TXN_EMPTY)
        cols.append_raw(uuids[16 * r : 16 * r + 16], values, pairs, state, None, txn)
        if flags[r] & DEAD:
            cols.recs[(r << 6) + TAIL] |= DEAD
    return cols, pos


# ---- version 2 (msgpack lists) --------------------------------------------------------------


def _decode_legacy(owner: SegmentSource, data: bytes) -> CacheState:
    tp = owner.topic_id_partition
    limit = len(data)
    try:
        body = msgpack.unpackb(
            data,
            raw=False,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit // 2,
            max_ext_len=0,
        )
        version, topic_id, partition, segments_state, epochs_state, total = body
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BlockError(f"not a cache block: {type(exc).__name__}: {exc}") from exc
    if version != LEGACY_BLOCK_VERSION:
        raise BlockError(f"block version {version!r}, expected {BLOCK_VERSION}")
    if topic_id != tp.topic_id.bytes or partition != tp.partition:
        raise BlockError(f"the block holds another partition (partition {partition!r})")
    segments = [segment_fields(item) for item in segments_state]
    cols = SegmentColumns()
    load_rows(cols, segments)
    rows = len(cols)
    if len({item[0] for item in segments}) != rows:
        raise BlockError("a segment id appears twice")
    if total != cols.total_size():
        raise BlockError(f"total size {total!r} is not the sum of the segments' sizes")
    epochs = {}
    for epoch, starts, ends, indexes, unreferenced, highest, size in epochs_state:
        if not len(starts) == len(ends) == len(indexes):
            raise BlockError(f"epoch {epoch}: index lists of different lengths")
        every = [*indexes, *unreferenced]
        if every and not 0 <= min(every) <= max(every) < rows:
            raise BlockError(f"epoch {epoch}: a segment index out of range")
        st = RemoteLogLeaderEpochState(owner)
        st.starts = array("q", starts)
        st.ends = array("q", ends)
        st.rows = array("i", indexes)
        st.unreferenced_rows = set(unreferenced)
        st.highest_offset = highest
        st.size_bytes = size
        epochs[epoch] = st
    return CacheState(cols, epochs, total, None)


def decode_block(owner: SegmentSource, data: bytes) -> CacheState:
    """The state of any block version of ``owner``'s partition; BlockError if inconsistent."""
    try:
        if data[:4] in (MAGIC, MAGIC_V3):
            return decode_v4(owner, data)
        return _decode_legacy(owner, data)
    except BlockError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError) as exc:
        raise BlockError(f"inconsistent cache block: {type(exc).__name__}: {exc}") from exc
    except (struct.error, msgpack.UnpackException) as exc:
        raise BlockError(f"not a cache block: {type(exc).__name__}: {exc}") from exc
