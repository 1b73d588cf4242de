"""Packed storage of one user partition's remote segments: one fixed-size record per
segment (the columnar metadata cache's bottom layer).

Invariant: record ``r`` (bytes ``64r`` to ``64r + 64`` of ``recs``, little-endian,
:data:`RECORD` layout) describes segment row ``r``. Its leader epochs are either
inline (``first < 0``: the one epoch ``-first - 1``, from the segment's start offset,
which is what Kafka writes for almost every segment) or ``count`` ``(epoch, start
offset)`` pairs of the flat column ``eps``, interleaved, from pair ``first`` on (when
``count`` is :data:`MANY`: up to the next non-inline record's ``first``, or the
column's end); pairs are in row order. A row keeps its number until
:meth:`SegmentColumns.compact`, which renumbers the live rows in order and returns the
map; a killed (deleted) row stays, flagged dead, with size 0, until then. :meth:`find`
answers exactly the live rows. ``recs`` and ``eps`` are either owned (bytearray, array)
or read-only memoryviews into the block they were decoded from ("frozen", zero-copy);
every write thaws them (one copy) first.

Row-major because a point lookup reads one whole segment: its record is one cache line
(64-byte aligned within the block), and usually holds its epoch too, where one array
per field cost a cache and TLB miss per field at 10M segments. A segment costs 64 bytes
here (plus 16 per leader epoch when they are not inline), plus its lazily built id
index (8-16 bytes), instead of the ~700
bytes of a RemoteLogSegmentMetadata and its members; the objects are built only when a
read returns one (:meth:`metadata`, on the fast path below).

The fast path builds the frozen model objects through mutable "shadow" classes with the
same slot layout and then switches their ``__class__`` (``rlmm.cache._objects``): plain
slot stores instead of ~15 ``object.__setattr__`` calls, 5x faster. It is used only if
probe rows read through both copies of :meth:`SegmentColumns.metadata` (and of the
segment id builder) give equal objects and ``RLMM_NO_FAST_PATHS`` is unset
(``FAST_OBJECTS``); otherwise the model's constructors are.
"""

from __future__ import annotations

import functools
import struct
import sys
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress
from types import MappingProxyType
from typing import Final

from rlmm import _fast_paths
from rlmm.cache._custom_column import CustomMetadataColumn
from rlmm.cache._objects import (
    UUID_SAFETY_UNKNOWN,
    Metadata,
    SegmentIdShadow,
    SegmentShadow,
    fast_path_works,
    fast_segment_id,
    new_object,
    set_uuid_int,
    set_uuid_safe,
    slow_segment_id,
)
from rlmm.codec import build as _build
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

# One segment: uuid, start, end, max timestamp, event timestamp (int64), size, broker,
# first epoch pair or -(inline epoch + 1) (int32), then flags (low byte) | count << 8. Little-endian
# whatever the host, so a block needs no byte swapping for its records.
RECORD: Final = struct.Struct("<16sqqqqiiiI")
WIDTH: Final = 64
assert RECORD.size == WIDTH
_START, _END, _MAX_TS, _EVENT_TS, _SIZE, _BROKER, _FIRST, TAIL = 16, 24, 32, 40, 48, 52, 56, 60
MANY: Final = 0xFFFFFF  # count field saturated: the next record's first pair bounds them
_INLINE_MAX: Final = (1 << 31) - 2  # largest epoch that fits inline as -(epoch + 1)
_I64: Final = struct.Struct("<q")
_I32: Final = struct.Struct("<i")
_U32: Final = struct.Struct("<I")
NATIVE: Final = sys.byteorder
assert array("q").itemsize == 8  # the block format's epoch pairs

_MIX: Final = 0x9E3779B97F4A7C15
_MASK64: Final = (1 << 64) - 1


def _slot_hash(raw: bytes | bytearray | memoryview, mask: int) -> int:
    # uuid4s are random, but tests and tools use small or sequential ids: mix the bits.
    x = int.from_bytes(raw, "little")
    return (((x ^ (x >> 64)) & _MASK64) * _MIX >> 29) & mask


# ---- building model objects (rlmm.cache._objects) ------------------------------------

_UUID = uuid.UUID
_PROXY = MappingProxyType


# ---- the columns ---------------------------------------------------------------------------

_unpack_record = RECORD.unpack_from
_FIRST_TAIL: Final = struct.Struct("<iI")
_KEY: Final = struct.Struct("<16sqq")
_START_FIRST: Final = struct.Struct("<16xq32xi")  # (start offset, first field)
_START_END: Final = struct.Struct("<16xqq")
_FACTS: Final = struct.Struct("<16xqqq8xi8xB")  # start, end, max timestamp, size, flags


class SegmentColumns:
    """The segments of one partition as packed records (see the module docstring)."""

    __slots__ = ("custom", "dead", "eps", "frozen", "recs", "table")

    def __init__(self) -> None:
        self.recs: bytearray | memoryview = bytearray()  # WIDTH bytes a row
        self.eps: array[int] | memoryview = array("q")  # epoch, start offset, epoch, ...
        self.custom = CustomMetadataColumn()  # every segment rlmm copies has a manifest
        self.dead = 0
        self.frozen = False
        # Open addressing over row + 1 (0: empty), built on the first find(): a restored
        # partition that is only read never pays for it.
        self.table: array[int] | None = None

    def __len__(self) -> int:
        return len(self.recs) >> 6

    @property
    def live(self) -> int:
        return len(self) - self.dead

    @property
    def pairs(self) -> int:
        """Number of (epoch, start offset) pairs in ``eps``."""
        return len(self.eps) >> 1

    # ---- frozen (zero-copy) columns --------------------------------------------------------

    def thaw(self) -> None:
        """Copy memoryview columns into owned buffers (before the first write)."""
        self.owned()

    def owned(self) -> tuple[bytearray, array[int]]:
        """``recs`` and ``eps``, thawed first if they are views (for a write)."""
        recs, eps = self.recs, self.eps
        if isinstance(recs, bytearray) and isinstance(eps, array):
            return recs, eps
        owned_recs = bytearray(recs)
        owned_eps = array("q")
        owned_eps.frombytes(memoryview(eps).cast("B"))
        self.recs, self.eps = owned_recs, owned_eps
        self.frozen = False
        return owned_recs, owned_eps

    def raw_columns(self) -> list[bytearray | memoryview | array[int]]:
        """The buffers the block format stores, in its order."""
        return [self.recs, self.eps]

    @classmethod
    def from_buffers(
        cls, rows: int, pairs: int, data: memoryview, pos: int, swap: bool
    ) -> tuple[SegmentColumns, int]:
        """Columns over ``data`` from ``pos`` (as :meth:`raw_columns` laid them out).

        Returns them and the position after them; views (frozen) unless ``swap`` (a
        block of another byte order: its epoch pairs are copied and byte-swapped; the
        records are little-endian everywhere). ValueError if short.
        """
        cols = cls()
        width = WIDTH * rows
        if pos + width + 16 * pairs > len(data):
            raise ValueError("the segment columns run past the end of the block")
        recs = data[pos : pos + width]
        pos += width
        eps = data[pos : pos + 16 * pairs]
        pos += 16 * pairs
        if swap:
            cols.recs = bytearray(recs)
            cols.eps = array("q", bytes(eps))
            cols.eps.byteswap()
        else:
            cols.recs = recs
            cols.eps = eps.cast("q")
        cols.frozen = not swap
        return cols, pos

    # ---- writes --------------------------------------------------------------------------------

    def _place(self, start: int, flat_epochs: Sequence[int]) -> tuple[int, int]:
        """(first field, count field) of a new row with these epoch pairs."""
        if len(flat_epochs) == 2 and flat_epochs[1] == start and 0 <= flat_epochs[0] <= _INLINE_MAX:
            return -flat_epochs[0] - 1, 1
        return self.pairs, min(len(flat_epochs) >> 1, MANY)

    def _push(self, record: bytes, flat_epochs: Iterable[int]) -> int:
        # Packed first (by the callers), so a value out of range changes nothing.
        recs, eps = self.owned()
        row = len(self)
        eps.extend(flat_epochs)
        recs += record
        return row

    def append(self, m: RemoteLogSegmentMetadata) -> int:
        """Add ``m`` as a new (live) row; returns its row number."""
        raw = m.remote_log_segment_id.id.bytes
        flat: list[int] = []
        for epoch, start in m.segment_leader_epochs.items():
            flat += (epoch, start)
        flags = int(m.state) | (TXN_EMPTY if m.txn_index_empty else 0)
        first, count = self._place(m.start_offset, flat)
        record = RECORD.pack(
            raw,
            m.start_offset,
            m.end_offset,
            m.max_timestamp_ms,
            m.event_timestamp_ms,
            m.segment_size_in_bytes,
            m.broker_id,
            first,
            flags | count << 8,
        )
        row = self._push(record, flat if first >= 0 else ())
        if m.custom_metadata is not None:
            self.custom.set(row, m.custom_metadata)
        if self.table is not None:
            self._index(self.table, row, raw)
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
        start, end, max_ts, broker, event_ts, size = values
        if len(raw) != 16 or not flat_epochs or len(flat_epochs) % 2 or not 0 <= state <= 3:
            raise ValueError(f"row {len(self)}: malformed segment fields")
        flags = state | (TXN_EMPTY if txn else 0)
        first, count = self._place(start, flat_epochs)
        record = RECORD.pack(
            raw, start, end, max_ts, event_ts, size, broker, first, flags | count << 8
        )
        row = self._push(record, flat_epochs if first >= 0 else ())
        if custom is not None:
            self.custom.set(row, custom)
        self.table = None
        return row

    def set_update(
        self, row: int, state: int, broker: int, event_ts: int, custom: bytes | None
    ) -> None:
        packed_broker = _I32.pack(broker)  # before any change: out of range changes nothing
        packed_ts = _I64.pack(event_ts)
        self.thaw()
        at = row << 6
        recs = self.recs
        recs[at + TAIL] = (recs[at + TAIL] & ~STATE_MASK) | state
        recs[at + _BROKER : at + _BROKER + 4] = packed_broker
        recs[at + _EVENT_TS : at + _EVENT_TS + 8] = packed_ts
        if custom is None:
            self.custom.pop(row)
        else:
            self.custom.set(row, custom)

    def kill(self, row: int) -> None:
        """The segment is gone (DELETE_SEGMENT_FINISHED): its row is dead until compact()."""
        self.thaw()
        at = row << 6
        self.recs[at + TAIL] |= DEAD
        _I32.pack_into(self.recs, at + _SIZE, 0)  # so that the sizes always sum to the live total
        self.custom.pop(row)
        self.dead += 1

    def compact(self) -> list[int]:
        """Drop dead rows; returns old row -> new row (-1 for a dropped one)."""
        recs, eps = self.owned()
        keep = [r for r in range(len(self)) if not recs[(r << 6) + TAIL] & DEAD]
        remap = [-1] * len(self)
        for new, old in enumerate(keep):
            remap[old] = new
        out = bytearray()
        new_eps = array("q")
        for r in keep:
            record = recs[r << 6 : (r + 1) << 6]
            if _I32.unpack_from(record, _FIRST)[0] >= 0:
                a, b = self.pair_bounds(r)
                _I32.pack_into(record, _FIRST, len(new_eps) >> 1)
                new_eps += eps[2 * a : 2 * b]
            out += record
        self.recs, self.eps = out, new_eps
        self.custom.renumber(remap)
        self.dead = 0
        self.table = None
        return remap

    # ---- the id index --------------------------------------------------------------------------

    def _index(self, table: array[int], row: int, raw: bytes | memoryview) -> None:
        if 2 * (len(self) + 1) > len(table):
            self._build_table()
            return
        mask = len(table) - 1
        h = _slot_hash(raw, mask)
        while table[h]:
            h = (h + 1) & mask
        table[h] = row + 1

    def _build_table(self) -> array[int]:
        capacity = 16
        while capacity < 2 * (len(self) + 1):
            capacity *= 2
        table = array("i", bytes(4 * capacity))
        mask = capacity - 1
        recs = self.recs
        for row in range(len(self)):
            at = row << 6
            if recs[at + TAIL] & DEAD:
                continue
            h = _slot_hash(recs[at : at + 16], mask)
            while table[h]:
                h = (h + 1) & mask
            table[h] = row + 1
        self.table = table
        return table

    def find(self, raw: bytes) -> int:
        """The live row of the segment with uuid bytes ``raw``, or -1."""
        table = self.table if self.table is not None else self._build_table()
        mask = len(table) - 1
        h = _slot_hash(raw, mask)
        recs = self.recs
        while True:
            v = table[h]
            if not v:
                return -1
            at = (v - 1) << 6
            if recs[at : at + 16] == raw and not recs[at + TAIL] & DEAD:
                return v - 1
            h = (h + 1) & mask

    # ---- reads ---------------------------------------------------------------------------------

    def flags_of(self, row: int) -> int:
        return int(self.recs[(row << 6) + TAIL])

    def state(self, row: int) -> RemoteLogSegmentState:
        return STATES[self.recs[(row << 6) + TAIL] & STATE_MASK]

    def size_of(self, row: int) -> int:
        return int(_I32.unpack_from(self.recs, (row << 6) + _SIZE)[0])

    def end_of(self, row: int) -> int:
        return int(_I64.unpack_from(self.recs, (row << 6) + _END)[0])

    def uuid_bytes(self, row: int) -> bytes:
        return bytes(self.recs[row << 6 : (row << 6) + 16])

    def firsts(self) -> Sequence[int]:
        """Every record's first field (for the block checks; negative: an inline epoch)."""
        if NATIVE == "little" and len(self):
            return memoryview(self.recs).cast("i")[_FIRST >> 2 :: WIDTH >> 2]
        return [r[7] for r in RECORD.iter_unpack(self.recs)]

    def total_size(self) -> int:
        """Summed size of all rows (dead rows count 0)."""
        if NATIVE == "little" and len(self):
            return sum(memoryview(self.recs).cast("i")[_SIZE >> 2 :: WIDTH >> 2])
        return sum(r[5] for r in RECORD.iter_unpack(self.recs))

    def live_rows(self) -> Iterator[int]:
        if not self.dead:
            yield from range(len(self))
            return
        recs = self.recs
        for row in range(len(self)):
            if not recs[(row << 6) + TAIL] & DEAD:
                yield row

    def _wanted_flags(self, states: frozenset[RemoteLogSegmentState] | None) -> bytes:
        """One byte a row: 1 when the row is live and in ``states`` (all: None), else 0."""
        return bytes(self.recs[TAIL::WIDTH]).translate(_wanted(states))

    def count_in(self, states: frozenset[RemoteLogSegmentState] | None = None) -> int:
        """How many live rows are in ``states`` (all: None)."""
        if states is None:
            return self.live
        return self._wanted_flags(states).count(1)

    def min_max_timestamp(
        self, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> int | None:
        """The smallest max timestamp of the live rows in ``states`` (None: no such row),
        read from the column: no object per row."""
        flags = self._wanted_flags(states)
        if NATIVE == "little" and flags:
            column: Iterable[int] = memoryview(self.recs).cast("q")[_MAX_TS >> 3 :: WIDTH >> 3]
        else:
            column = [r[3] for r in RECORD.iter_unpack(self.recs)]
        return min(compress(column, flags), default=None)

    def facts(self, row: int) -> tuple[int, int, int, int, RemoteLogSegmentState]:
        """(start offset, end offset, max timestamp, size, state) of ``row``: one read."""
        start, end, max_ts, size, flags = _FACTS.unpack_from(self.recs, row << 6)
        return start, end, max_ts, size, STATES[flags & STATE_MASK]

    def contiguous_end(self, states: frozenset[RemoteLogSegmentState] | None = None) -> int | None:
        """The highest end offset of the live rows in ``states`` reached from the lowest
        start offset without a gap (a row starting more than one past the ends so far);
        None when there is no such row."""
        recs = self.recs
        end = None
        for row in self.rows_by_start(states):
            start, last = _START_END.unpack_from(recs, row << 6)
            if end is None:
                end = last
            elif start > end + 1:
                break
            elif last > end:
                end = last
        return end

    def rows_by_start(
        self,
        states: frozenset[RemoteLogSegmentState] | None = None,
        keep_uuid: Callable[[bytes], bool] | None = None,
    ) -> array[int]:
        """Live rows (all, or those in ``states``, and whose uuid bytes ``keep_uuid``
        keeps) by start offset, then end offset, then row: a packed array, so a walk over
        a large partition holds no object per row."""
        rows = list(compress(range(len(self)), self._wanted_flags(states)))
        if keep_uuid is not None:
            recs = self.recs
            rows = [r for r in rows if keep_uuid(bytes(recs[r << 6 : (r << 6) + 16]))]
        if NATIVE == "little" and rows:
            longs = memoryview(self.recs).cast("q")
            rows.sort(key=longs[_END >> 3 :: WIDTH >> 3].__getitem__)
            rows.sort(key=longs[_START >> 3 :: WIDTH >> 3].__getitem__)
        else:
            rows.sort(key=lambda r: _KEY.unpack_from(self.recs, r << 6)[1:])
        return array("i", rows)

    def pair_bounds(self, row: int) -> tuple[int, int]:
        """Pairs ``[a, b)`` of ``eps`` of a row whose epochs are not inline."""
        first, tail = _FIRST_TAIL.unpack_from(self.recs, (row << 6) + _FIRST)
        count = tail >> 8
        if count != MANY:
            return first, first + count
        for later in range(row + 1, len(self)):
            bound = _I32.unpack_from(self.recs, (later << 6) + _FIRST)[0]
            if bound >= 0:
                return first, bound
        return first, self.pairs

    def epoch_items(self, row: int) -> list[tuple[int, int]]:
        """The segment's (leader epoch, start offset) pairs, ascending."""
        start, first = _START_FIRST.unpack_from(self.recs, row << 6)
        if first < 0:
            return [(-first - 1, start)]
        a, b = self.pair_bounds(row)
        eps = self.eps
        return list(zip(eps[2 * a : 2 * b : 2], eps[2 * a + 1 : 2 * b : 2], strict=True))

    def epoch_ranges(self, row: int) -> list[tuple[int, int, int]]:
        """(epoch, first offset, last offset) of each leader epoch inside the segment."""
        items = self.epoch_items(row)
        out = []
        for i, (epoch, start) in enumerate(items):
            end = items[i + 1][1] - 1 if i + 1 < len(items) else self.end_of(row)
            out.append((epoch, start, end))
        return out

    def uuid_int(self, row: int) -> int:
        return int.from_bytes(self.recs[row << 6 : (row << 6) + 16], "big")

    def sort_key(self, row: int) -> tuple[int, int, int]:
        """As the listing order: start offset, end offset, uuid."""
        raw, start, end = _KEY.unpack_from(self.recs, row << 6)
        return (start, end, int.from_bytes(raw, "big"))

    def segment_id(self, tp: TopicIdPartition, row: int) -> RemoteLogSegmentId:
        return make_segment_id(tp, self.uuid_int(row))

    def metadata(self, tp: TopicIdPartition, row: int) -> RemoteLogSegmentMetadata:
        """A new RemoteLogSegmentMetadata of ``row`` (the hot path of every point lookup).

        The fast copy; :meth:`metadata_by_constructors` replaces it when the probe at
        import finds the two unequal (or ``RLMM_NO_FAST_PATHS`` is set).
        """
        # One unpack of one record (one cache line), which usually holds the epoch too.
        raw, start, end, max_ts, event_ts, size, broker, first, tail = _unpack_record(
            self.recs, row << 6
        )
        if first < 0:
            epochs = {-first - 1: start}
        elif tail >> 8 == 1:
            eps = self.eps
            epochs = {eps[2 * first]: eps[2 * first + 1]}
        else:
            epochs = dict(self.epoch_items(row))
        n = int.from_bytes(raw, "big")
        # fast_segment_id inlined, and the metadata built the same way: this is most of
        # a lookup's cost.
        u = new_object(_UUID)
        set_uuid_int(u, n)
        set_uuid_safe(u, UUID_SAFETY_UNKNOWN)
        sid = SegmentIdShadow()
        sid.topic_id_partition = tp  # type: ignore[attr-defined]
        sid.id = u  # type: ignore[attr-defined]
        sid._hash = hash(n)  # type: ignore[attr-defined]
        sid.__class__ = RemoteLogSegmentId  # type: ignore[assignment]
        m = SegmentShadow()
        m.remote_log_segment_id = sid  # type: ignore[attr-defined]
        m.start_offset = start  # type: ignore[attr-defined]
        m.end_offset = end  # type: ignore[attr-defined]
        m.max_timestamp_ms = max_ts  # type: ignore[attr-defined]
        m.broker_id = broker  # type: ignore[attr-defined]
        m.event_timestamp_ms = event_ts  # type: ignore[attr-defined]
        m.segment_size_in_bytes = size  # type: ignore[attr-defined]
        m.segment_leader_epochs = _PROXY(epochs)  # type: ignore[attr-defined]
        m.state = STATES[tail & STATE_MASK]  # type: ignore[attr-defined]
        m.custom_metadata = self.custom.get(row)  # type: ignore[attr-defined]
        m.txn_index_empty = tail & TXN_EMPTY != 0  # type: ignore[attr-defined]
        m.__class__ = RemoteLogSegmentMetadata  # type: ignore[assignment]
        return m  # type: ignore[return-value]

    def metadata_by_constructors(self, tp: TopicIdPartition, row: int) -> RemoteLogSegmentMetadata:
        """:meth:`metadata` through the codec's builders (the model's constructors when
        those are not safe): the slow copy, and the reference the probe checks against."""
        raw, start, end, max_ts, event_ts, size, broker, _first, tail = _unpack_record(
            self.recs, row << 6
        )
        return _build.segment_metadata(
            slow_segment_id(tp, int.from_bytes(raw, "big")),
            start,
            end,
            max_ts,
            broker,
            event_ts,
            size,
            dict(self.epoch_items(row)),
            STATES[tail & STATE_MASK],
            self.custom.get(row),
            bool(tail & TXN_EMPTY),
        )


FAST_METADATA: Final[Metadata] = SegmentColumns.metadata
FAST_OBJECTS: Final = _fast_paths.ALLOWED and fast_path_works(FAST_METADATA, SegmentColumns)
make_segment_id: Final = fast_segment_id if FAST_OBJECTS else slow_segment_id
if not FAST_OBJECTS:
    SegmentColumns.metadata = SegmentColumns.metadata_by_constructors  # type: ignore[method-assign]


@functools.cache
def _wanted(states: frozenset[RemoteLogSegmentState] | None) -> bytes:
    """A ``bytes.translate`` table: a flags byte -> 1 when its row is live and in ``states``."""
    codes = None if states is None else {int(s) for s in states}
    return bytes(
        int(not v & DEAD and (codes is None or v & STATE_MASK in codes)) for v in range(256)
    )
