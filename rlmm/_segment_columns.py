"""Packed storage of one user partition's remote segments: one row per segment, one
typed array per field (the columnar metadata cache's bottom layer).

Invariant: row ``r`` of every per-row column describes the same segment, and the flat
leader-epoch columns hold its ``(epoch, start offset)`` pairs from ``ep_first[r]`` up to
the next row's ``ep_first`` (or their end). A row keeps its number until
:meth:`SegmentColumns.compact`, which renumbers the live rows in order and returns the
map; a killed (deleted) row stays, flagged dead, with size 0, until then. :meth:`find`
answers exactly the live rows. Columns are either owned arrays or read-only
memoryviews into the block they were decoded from ("frozen", zero-copy); every write
thaws them (one copy) first.

A segment costs about 75 bytes here (16 uuid, 4x8 offsets/times, 2x4 size/broker, 1
flags, 4 epoch index, 12 per leader epoch) plus its lazily built id index (8-16 bytes),
instead of the ~700 bytes of a RemoteLogSegmentMetadata and its members; the objects are
built only when a read returns one (:meth:`metadata`, on the fast path below).

The fast path builds the frozen model objects through mutable "shadow" classes with the
same slot layout and then switches their ``__class__``: plain slot stores instead of
~15 ``object.__setattr__`` calls, 5x faster. It is used only if a probe object built
both ways is equal (``FAST_OBJECTS``); otherwise the model's constructors are.
"""

from __future__ import annotations

import sys
import uuid
from array import array
from collections.abc import Iterable, Iterator, Sequence
from types import MappingProxyType
from typing import Any, Final

from rlmm import _codec_build as _build
from rlmm._codec_wire import FAST_UUID, uuid_from_int
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

STATES: Final = tuple(RemoteLogSegmentState)
STATE_MASK: Final = 0b11
TXN_EMPTY: Final = 0b100
DEAD: Final = 0b1000

# (name, typecode) of the per-row columns, then of the flat leader-epoch columns; the
# block format stores them in this order, 8-byte columns first so all stay aligned.
ROW_COLUMNS: Final = (
    ("start", "q"),
    ("end", "q"),
    ("max_ts", "q"),
    ("event_ts", "q"),
    ("size", "i"),
    ("broker", "i"),
    ("ep_first", "i"),
    ("flags", "B"),
)
EPOCH_COLUMNS: Final = (("ep_start", "q"), ("ep_epoch", "i"))
NATIVE: Final = sys.byteorder
assert array("i").itemsize == 4 and array("q").itemsize == 8  # the block format's sizes

_MIX: Final = 0x9E3779B97F4A7C15
_MASK64: Final = (1 << 64) - 1


def _slot_hash(raw: bytes | memoryview, mask: int) -> int:
    # uuid4s are random, but tests and tools use small or sequential ids: mix the bits.
    x = int.from_bytes(raw, "little")
    return (((x ^ (x >> 64)) & _MASK64) * _MIX >> 29) & mask


# ---- building model objects ----------------------------------------------------------


class _SegmentIdShadow:
    __slots__ = RemoteLogSegmentId.__slots__


class _SegmentShadow:
    __slots__ = RemoteLogSegmentMetadata.__slots__


_new = object.__new__
_set_slot = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown
_UUID = uuid.UUID
_PROXY = MappingProxyType


def _fast_segment_id(tp: TopicIdPartition, n: int) -> RemoteLogSegmentId:
    # uuid.UUID built as _codec_wire's fast path does (FAST_UUID is part of the check).
    u = _new(uuid.UUID)
    _set_slot(u, "int", n)
    _set_slot(u, "is_safe", _UNKNOWN)
    sid = _SegmentIdShadow()
    sid.topic_id_partition = tp  # type: ignore[attr-defined]
    sid.id = u  # type: ignore[attr-defined]
    sid._hash = hash(n)  # type: ignore[attr-defined]  # as RemoteLogSegmentId.__post_init__
    sid.__class__ = RemoteLogSegmentId  # type: ignore[assignment]
    return sid  # type: ignore[return-value]


def _slow_segment_id(tp: TopicIdPartition, n: int) -> RemoteLogSegmentId:
    return _build.segment_id(tp, uuid_from_int(n))


def _fast_metadata(
    sid: RemoteLogSegmentId,
    start: int,
    end: int,
    max_ts: int,
    broker: int,
    event_ts: int,
    size: int,
    epochs: dict[int, int],
    state: RemoteLogSegmentState,
    custom: bytes | None,
    txn: bool,
) -> RemoteLogSegmentMetadata:
    m = _SegmentShadow()
    m.remote_log_segment_id = sid  # type: ignore[attr-defined]
    m.start_offset = start  # type: ignore[attr-defined]
    m.end_offset = end  # type: ignore[attr-defined]
    m.max_timestamp_ms = max_ts  # type: ignore[attr-defined]
    m.broker_id = broker  # type: ignore[attr-defined]
    m.event_timestamp_ms = event_ts  # type: ignore[attr-defined]
    m.segment_size_in_bytes = size  # type: ignore[attr-defined]
    m.segment_leader_epochs = MappingProxyType(epochs)  # type: ignore[attr-defined]
    m.state = state  # type: ignore[attr-defined]
    m.custom_metadata = custom  # type: ignore[attr-defined]
    m.txn_index_empty = txn  # type: ignore[attr-defined]
    m.__class__ = RemoteLogSegmentMetadata  # type: ignore[assignment]
    return m  # type: ignore[return-value]


def _fast_path_works() -> bool:
    """The shadow classes share the model's layout and build equal objects."""
    if (
        _SegmentIdShadow.__slots__ != RemoteLogSegmentId.__slots__
        or _SegmentShadow.__slots__ != RemoteLogSegmentMetadata.__slots__
        or not _build.FAST_BUILD
        or not FAST_UUID
    ):
        return False
    tp = TopicIdPartition(uuid_from_int(1 << 100), "probe", 3)
    n = 7 << 64 | 9
    args = (5, 9, 11, 2, 13, 17, {0: 5, 4: 7}, STATES[1], b"x", True)
    try:
        fast_sid = _fast_segment_id(tp, n)
        fast = _fast_metadata(fast_sid, *args)
    except TypeError:  # __class__ assignment refused: the layouts differ
        return False
    slow_sid = _slow_segment_id(tp, n)
    slow = RemoteLogSegmentMetadata(slow_sid, *args)
    return (
        type(fast) is RemoteLogSegmentMetadata
        and type(fast_sid) is RemoteLogSegmentId
        and fast == slow
        and hash(fast_sid) == hash(slow_sid)
        and fast_sid == slow_sid
        and dict(fast.segment_leader_epochs) == {0: 5, 4: 7}
    )


FAST_OBJECTS: Final = _fast_path_works()
make_segment_id: Final = _fast_segment_id if FAST_OBJECTS else _slow_segment_id
_make_metadata: Final = _fast_metadata if FAST_OBJECTS else _build.segment_metadata


# ---- the columns ---------------------------------------------------------------------------


class SegmentColumns:
    """The segments of one partition as packed columns (see the module docstring)."""

    __slots__ = (
        "broker",
        "custom",
        "dead",
        "end",
        "ep_epoch",
        "ep_first",
        "ep_start",
        "event_ts",
        "flags",
        "frozen",
        "max_ts",
        "size",
        "start",
        "table",
        "uuids",
    )

    def __init__(self) -> None:
        self.uuids: Any = bytearray()  # 16 bytes a row (bytearray, or a frozen view)
        self.start: Any = array("q")
        self.end: Any = array("q")
        self.max_ts: Any = array("q")
        self.event_ts: Any = array("q")
        self.size: Any = array("i")
        self.broker: Any = array("i")
        self.ep_first: Any = array("i")
        self.flags: Any = array("B")
        self.ep_start: Any = array("q")
        self.ep_epoch: Any = array("i")
        self.custom: dict[int, bytes] = {}  # rows whose custom metadata is not None (rare)
        self.dead = 0
        self.frozen = False
        # Open addressing over row + 1 (0: empty), built on the first find(): a restored
        # partition that is only read never pays for it.
        self.table: Any = None

    def __len__(self) -> int:
        return len(self.flags)

    @property
    def live(self) -> int:
        return len(self.flags) - self.dead

    # ---- frozen (zero-copy) columns --------------------------------------------------------

    def thaw(self) -> None:
        """Copy memoryview columns into owned arrays (before the first write)."""
        if not self.frozen:
            return
        for name, code in (*ROW_COLUMNS, *EPOCH_COLUMNS):
            owned = array(code)
            owned.frombytes(getattr(self, name).cast("B"))
            setattr(self, name, owned)
        self.uuids = bytearray(self.uuids)
        self.frozen = False

    def raw_columns(self) -> list[bytes | memoryview | bytearray | array[Any]]:
        """The buffers the block format stores, in its order."""
        out: list[Any] = [self.uuids]
        out += [getattr(self, name) for name, _ in ROW_COLUMNS if _ == "q"]
        out += [self.ep_start]
        out += [getattr(self, name) for name, code in ROW_COLUMNS if code == "i"]
        out += [self.ep_epoch, self.flags]
        return out

    @classmethod
    def from_buffers(
        cls, rows: int, flat: int, data: memoryview, pos: int, copy: bool
    ) -> tuple[SegmentColumns, int]:
        """Columns over ``data`` from ``pos`` (as :meth:`raw_columns` laid them out).

        Returns them and the position after them; views (frozen) unless ``copy``
        (a block of another byte order: copied and byte-swapped). ValueError if short.
        """
        cols = cls()
        sizes: list[tuple[str, str, int]] = [("uuids", "B", 16 * rows)]
        sizes += [(name, "q", rows) for name, code in ROW_COLUMNS if code == "q"]
        sizes += [("ep_start", "q", flat)]
        sizes += [(name, "i", rows) for name, code in ROW_COLUMNS if code == "i"]
        sizes += [("ep_epoch", "i", flat), ("flags", "B", rows)]
        for name, code, count in sizes:
            width = array(code).itemsize * count
            if pos + width > len(data):
                raise ValueError(f"column {name} runs past the end of the block")
            view = data[pos : pos + width]
            pos += width
            if copy:
                owned: Any = bytearray(view) if name == "uuids" else array(code, bytes(view))
                if code != "B":
                    owned.byteswap()
                setattr(cols, name, owned)
            else:
                setattr(cols, name, view if code == "B" else view.cast(code))  # type: ignore[call-overload]
        cols.frozen = not copy
        return cols, pos

    # ---- writes --------------------------------------------------------------------------------

    def append(self, m: RemoteLogSegmentMetadata) -> int:
        """Add ``m`` as a new (live) row; returns its row number."""
        self.thaw()
        row = len(self.flags)
        raw = m.remote_log_segment_id.id.bytes
        self.uuids += raw
        self.start.append(m.start_offset)
        self.end.append(m.end_offset)
        self.max_ts.append(m.max_timestamp_ms)
        self.event_ts.append(m.event_timestamp_ms)
        self.size.append(m.segment_size_in_bytes)
        self.broker.append(m.broker_id)
        self.ep_first.append(len(self.ep_epoch))
        for epoch, start in m.segment_leader_epochs.items():
            self.ep_epoch.append(epoch)
            self.ep_start.append(start)
        self.flags.append(int(m.state) | (TXN_EMPTY if m.txn_index_empty else 0))
        if m.custom_metadata is not None:
            self.custom[row] = m.custom_metadata
        if self.table is not None:
            self._index(row, raw)
        return row

    def append_raw(
        self,
        raw: bytes,
        values: tuple[int, int, int, int, int, int],
        flat_epochs: Sequence[int],
        state: int,
        custom: bytes | None,
        txn: bool,
    ) -> int:
        """Add a row from snapshot fields (start, end, max_ts, broker, event_ts, size)."""
        self.thaw()
        row = len(self.flags)
        start, end, max_ts, broker, event_ts, size = values
        if len(raw) != 16 or not flat_epochs or len(flat_epochs) % 2 or not 0 <= state <= 3:
            raise ValueError(f"row {row}: malformed segment fields")
        self.uuids += raw
        self.start.append(start)
        self.end.append(end)
        self.max_ts.append(max_ts)
        self.event_ts.append(event_ts)
        self.size.append(size)
        self.broker.append(broker)
        self.ep_first.append(len(self.ep_epoch))
        self.ep_epoch.extend(flat_epochs[0::2])
        self.ep_start.extend(flat_epochs[1::2])
        self.flags.append(state | (TXN_EMPTY if txn else 0))
        if custom is not None:
            self.custom[row] = custom
        self.table = None
        return row

    def set_update(
        self, row: int, state: int, broker: int, event_ts: int, custom: bytes | None
    ) -> None:
        self.thaw()
        self.flags[row] = (self.flags[row] & ~STATE_MASK) | state
        self.broker[row] = broker
        self.event_ts[row] = event_ts
        if custom is None:
            self.custom.pop(row, None)
        else:
            self.custom[row] = custom

    def kill(self, row: int) -> None:
        """The segment is gone (DELETE_SEGMENT_FINISHED): its row is dead until compact()."""
        self.thaw()
        self.flags[row] |= DEAD
        self.size[row] = 0  # so that the sizes column always sums to the live total
        self.custom.pop(row, None)
        self.dead += 1

    def compact(self) -> list[int]:
        """Drop dead rows; returns old row -> new row (-1 for a dropped one)."""
        self.thaw()
        flags = self.flags
        keep = [r for r in range(len(flags)) if not flags[r] & DEAD]
        remap = [-1] * len(flags)
        for new, old in enumerate(keep):
            remap[old] = new
        ep_first, ep_epoch, ep_start = self.ep_first, self.ep_epoch, self.ep_start
        bounds = [*ep_first, len(ep_epoch)]
        new_first = array("i")
        new_epoch = array("i")
        new_start = array("q")
        for r in keep:
            new_first.append(len(new_epoch))
            new_epoch += ep_epoch[bounds[r] : bounds[r + 1]]
            new_start += ep_start[bounds[r] : bounds[r + 1]]
        self.ep_first, self.ep_epoch, self.ep_start = new_first, new_epoch, new_start
        for name, code in ROW_COLUMNS:
            if name != "ep_first":
                column = getattr(self, name)
                setattr(self, name, array(code, [column[r] for r in keep]))
        uuids = self.uuids
        self.uuids = bytearray(b"".join(uuids[16 * r : 16 * r + 16] for r in keep))
        self.custom = {remap[r]: v for r, v in self.custom.items()}
        self.dead = 0
        self.table = None
        return remap

    # ---- the id index --------------------------------------------------------------------------

    def _index(self, row: int, raw: bytes | memoryview) -> None:
        table = self.table
        if 2 * (len(self.flags) + 1) > len(table):
            self._build_table()
            return
        mask = len(table) - 1
        h = _slot_hash(raw, mask)
        while table[h]:
            h = (h + 1) & mask
        table[h] = row + 1

    def _build_table(self) -> None:
        capacity = 16
        while capacity < 2 * (len(self.flags) + 1):
            capacity *= 2
        table = array("i", bytes(4 * capacity))
        mask = capacity - 1
        uuids = self.uuids
        flags = self.flags
        for row in range(len(flags)):
            if flags[row] & DEAD:
                continue
            h = _slot_hash(uuids[16 * row : 16 * row + 16], mask)
            while table[h]:
                h = (h + 1) & mask
            table[h] = row + 1
        self.table = table

    def find(self, raw: bytes) -> int:
        """The live row of the segment with uuid bytes ``raw``, or -1."""
        if self.table is None:
            self._build_table()
        table = self.table
        mask = len(table) - 1
        h = _slot_hash(raw, mask)
        uuids = self.uuids
        flags = self.flags
        while True:
            v = table[h]
            if not v:
                return -1
            row = v - 1
            if uuids[16 * row : 16 * row + 16] == raw and not flags[row] & DEAD:
                return row
            h = (h + 1) & mask

    # ---- reads ---------------------------------------------------------------------------------

    def state(self, row: int) -> RemoteLogSegmentState:
        return STATES[self.flags[row] & STATE_MASK]

    def live_rows(self) -> Iterator[int]:
        flags = self.flags
        if not self.dead:
            yield from range(len(flags))
            return
        for row in range(len(flags)):
            if not flags[row] & DEAD:
                yield row

    def epoch_items(self, row: int) -> list[tuple[int, int]]:
        """The segment's (leader epoch, start offset) pairs, ascending."""
        a = self.ep_first[row]
        b = self.ep_first[row + 1] if row + 1 < len(self.flags) else len(self.ep_epoch)
        return list(zip(self.ep_epoch[a:b], self.ep_start[a:b], strict=True))

    def epoch_ranges(self, row: int) -> list[tuple[int, int, int]]:
        """(epoch, first offset, last offset) of each leader epoch inside the segment."""
        items = self.epoch_items(row)
        out = []
        for i, (epoch, start) in enumerate(items):
            end = items[i + 1][1] - 1 if i + 1 < len(items) else self.end[row]
            out.append((epoch, start, end))
        return out

    def uuid_int(self, row: int) -> int:
        return int.from_bytes(self.uuids[16 * row : 16 * row + 16], "big")

    def sort_key(self, row: int) -> tuple[int, int, int]:
        """As the listing order: start offset, end offset, uuid."""
        return (self.start[row], self.end[row], self.uuid_int(row))

    def segment_id(self, tp: TopicIdPartition, row: int) -> RemoteLogSegmentId:
        return make_segment_id(tp, self.uuid_int(row))

    def metadata(self, tp: TopicIdPartition, row: int) -> RemoteLogSegmentMetadata:
        """A new RemoteLogSegmentMetadata of ``row`` (the hot path of every point lookup)."""
        a = self.ep_first[row]
        b = self.ep_first[row + 1] if row + 1 < len(self.flags) else len(self.ep_epoch)
        epochs = (
            {self.ep_epoch[a]: self.ep_start[a]}
            if b - a == 1
            else dict(zip(self.ep_epoch[a:b], self.ep_start[a:b], strict=True))
        )
        n = int.from_bytes(self.uuids[16 * row : 16 * row + 16], "big")
        flags = self.flags[row]
        if not FAST_OBJECTS:
            return _build.segment_metadata(
                _slow_segment_id(tp, n),
                self.start[row],
                self.end[row],
                self.max_ts[row],
                self.broker[row],
                self.event_ts[row],
                self.size[row],
                epochs,
                STATES[flags & STATE_MASK],
                self.custom.get(row),
                bool(flags & TXN_EMPTY),
            )
        # _fast_segment_id and _fast_metadata inlined: this is most of a lookup's cost.
        u = _new(_UUID)
        _set_slot(u, "int", n)
        _set_slot(u, "is_safe", _UNKNOWN)
        sid = _SegmentIdShadow()
        sid.topic_id_partition = tp  # type: ignore[attr-defined]
        sid.id = u  # type: ignore[attr-defined]
        sid._hash = hash(n)  # type: ignore[attr-defined]
        sid.__class__ = RemoteLogSegmentId  # type: ignore[assignment]
        m = _SegmentShadow()
        m.remote_log_segment_id = sid  # type: ignore[attr-defined]
        m.start_offset = self.start[row]  # type: ignore[attr-defined]
        m.end_offset = self.end[row]  # type: ignore[attr-defined]
        m.max_timestamp_ms = self.max_ts[row]  # type: ignore[attr-defined]
        m.broker_id = self.broker[row]  # type: ignore[attr-defined]
        m.event_timestamp_ms = self.event_ts[row]  # type: ignore[attr-defined]
        m.segment_size_in_bytes = self.size[row]  # type: ignore[attr-defined]
        m.segment_leader_epochs = _PROXY(epochs)  # type: ignore[attr-defined]
        m.state = STATES[flags & STATE_MASK]  # type: ignore[attr-defined]
        m.custom_metadata = self.custom.get(row) if self.custom else None  # type: ignore[attr-defined]
        m.txn_index_empty = flags & TXN_EMPTY != 0  # type: ignore[attr-defined]
        m.__class__ = RemoteLogSegmentMetadata  # type: ignore[assignment]
        return m  # type: ignore[return-value]


def packed_rows(values: Iterable[int]) -> array[int]:
    """Row numbers as a packed column."""
    return array("i", values)
