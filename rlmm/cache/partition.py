"""Per-partition remote log metadata cache (Kafka's RemoteLogMetadataCache), columnar.

Invariant: the segments live as rows of one :class:`SegmentColumns`; each leader epoch
has a :class:`RemoteLogLeaderEpochState` (its own invariant is in ``_state``), and
``total_size_bytes`` always equals the summed size of all segments, so size queries are
O(1). State changes go through the two public writers, which check the transition
first and change nothing when it is illegal. RemoteLogSegmentMetadata objects
exist only when a read returns one: a small per-partition memo hands back the same
object for a segment read again (a consumer reads one segment many times) until the
segment changes. A cache decoded from a block reads that block's bytes in place until
its first change (``to_block`` then returns the same bytes); encoding re-points the
columns at the new block, so a cache never holds both its arrays and their encoding.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from typing import TypeAlias

from rlmm.cache._block import (
    SegmentFields,
    decode_block,
    decode_v4,
    encode_block,
    is_bytes_list,
    is_fields,
    load_rows,
    segment_fields,
    segment_to_state,
)
from rlmm.cache._columns import TXN_EMPTY, SegmentColumns
from rlmm.cache._state import CacheState, RemoteLogLeaderEpochState
from rlmm.cache.summary import SegmentSummary
from rlmm.errors import InvalidStateTransitionError, RemoteResourceNotFoundError
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    check_segment_transition,
)

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
# Objects handed out recently, per partition: identity for repeated reads of one
# segment (and for the archive's lineage, which compares segments with ``is``),
# without growing back into an object per segment.
MEMO_SIZE = 8
# Dead rows are dropped once they are this many and at least as many as the live ones.
COMPACT_MIN = 64

# One leader epoch in snapshot format 1: the epoch, its index [[start offset, segment
# uuid bytes], ...], its unreferenced segments' uuid bytes, its highest offset.
EpochFields: TypeAlias = tuple[int, list[tuple[int, bytes]], list[bytes], int | None]
# One partition's cache in snapshot format 1: its segments, then its epochs. Written as
# tuples; msgpack reads them back as lists (cache_fields takes either).
CacheFields: TypeAlias = tuple[list[SegmentFields], list[EpochFields]]


class SegmentsView(Mapping[RemoteLogSegmentId, RemoteLogSegmentMetadata]):
    """``cache.segments``: id -> metadata over the columns, objects built on access."""

    __slots__ = ("_cache",)

    def __init__(self, cache: RemoteLogMetadataCache) -> None:
        self._cache = cache

    def __getitem__(self, sid: RemoteLogSegmentId) -> RemoteLogSegmentMetadata:
        row = self._cache.row_of(sid)
        if row < 0:
            raise KeyError(sid)
        return self._cache.segment_at(row)

    def __contains__(self, sid: object) -> bool:
        return isinstance(sid, RemoteLogSegmentId) and self._cache.row_of(sid) >= 0

    def __iter__(self) -> Iterator[RemoteLogSegmentId]:
        cache = self._cache
        for row in cache.columns.live_rows():
            yield cache.columns.segment_id(cache.topic_id_partition, row)

    def __len__(self) -> int:
        return self._cache.columns.live

    def values(self) -> Iterator[RemoteLogSegmentMetadata]:  # type: ignore[override]
        cache = self._cache
        for row in cache.columns.live_rows():
            yield cache.segment_at(row, memo=False)


class RemoteLogMetadataCache:
    """All remote segments of one user partition, indexed per leader epoch."""

    __slots__ = (
        "_block",
        "_memo",
        "_memo_next",
        "_memo_ring",
        "columns",
        "epochs",
        "topic_id_partition",
        "total_size_bytes",
    )

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self.topic_id_partition = topic_id_partition
        self.columns = SegmentColumns()
        self.epochs: dict[int, RemoteLogLeaderEpochState] = {}
        self.total_size_bytes = 0
        self._block: bytes | None = None  # encoded copy of this exact state, if known
        self._memo: dict[int, RemoteLogSegmentMetadata] = {}
        # The memo's rows, oldest at _memo_next: each new entry evicts the oldest one, so
        # no read pays for freeing MEMO_SIZE objects at once.
        self._memo_ring = [-1] * MEMO_SIZE
        self._memo_next = 0

    @property
    def segments(self) -> SegmentsView:
        return SegmentsView(self)

    def row_of(self, sid: RemoteLogSegmentId) -> int:
        return self.columns.find(sid.id.bytes)

    def segment_at(self, row: int, memo: bool = True) -> RemoteLogSegmentMetadata:
        """The object of ``row``: the memoized one if handed out recently and unchanged."""
        cached = self._memo
        found = cached.get(row)
        if found is not None:
            return found
        found = self.columns.metadata(self.topic_id_partition, row)
        if memo:
            self._remember(row, found)
        return found

    def _remember(self, row: int, found: RemoteLogSegmentMetadata) -> None:
        """Memoize ``found`` in place of the oldest entry (one object freed per call)."""
        memo = self._memo
        ring = self._memo_ring
        k = self._memo_next
        old = ring[k]
        ring[k] = row
        self._memo_next = (k + 1) % MEMO_SIZE
        memo[row] = found
        if old != row:
            memo.pop(old, None)
        if len(memo) > MEMO_SIZE:
            memo.clear()  # concurrent readers raced on the ring: it never grows

    def _new_epoch(self, epoch: int) -> RemoteLogLeaderEpochState:
        state = self.epochs[epoch] = RemoteLogLeaderEpochState(self)
        return state

    def _changing(self) -> None:
        """Before a write: own the columns again (if they were views of a block)."""
        if self._block is not None:
            self._block = None
            self.columns.thaw()
            for state in self.epochs.values():
                state.thaw()

    # ---- validation (no side effects) -------------------------------------------------

    def check_add(self, metadata: RemoteLogSegmentMetadata) -> None:
        segment_id = metadata.remote_log_segment_id
        if metadata.state != _STARTED:
            raise InvalidStateTransitionError(
                f"a new segment must be added in COPY_SEGMENT_STARTED, got {metadata.state.name}"
                f" for {segment_id}"
            )
        row = self.row_of(segment_id)
        if row >= 0:
            raise InvalidStateTransitionError(
                f"segment {segment_id} already exists (state {self.columns.state(row).name})"
            )

    def _check_update(self, update: RemoteLogSegmentMetadataUpdate) -> int:
        segment_id = update.remote_log_segment_id
        row = self.row_of(segment_id)
        if row < 0:
            raise RemoteResourceNotFoundError(f"no remote log segment {segment_id}")
        check_segment_transition(self.columns.state(row), update.state, segment_id)
        return row

    def check_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        return self.segment_at(self._check_update(update), memo=False)

    # ---- state changes ----------------------------------------------------------------

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.check_add(metadata)
        self._changing()
        row = self.columns.append(metadata)
        size = metadata.segment_size_in_bytes
        self.total_size_bytes += size
        for epoch in metadata.segment_leader_epochs:
            state = self.epochs.get(epoch)
            if state is None:
                state = self._new_epoch(epoch)
            state.add_started(row)
            state.size_bytes += size

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        row = self._check_update(update)
        self._changing()
        cols = self.columns
        previous = cols.state(row)
        self._memo.pop(row, None)
        cols.set_update(
            row,
            int(update.state),
            update.broker_id,
            update.event_timestamp_ms,
            update.custom_metadata,
        )
        if update.state == previous:
            # Idempotent retry: only the event's timestamp/broker/custom metadata move.
            return
        if update.state == _FINISHED:
            for epoch, start, end in cols.epoch_ranges(row):
                self.epochs[epoch].add_finished(start, row, end)
        elif update.state == _DELETE_STARTED:
            for epoch, start, _end in cols.epoch_ranges(row):
                self.epochs[epoch].mark_deleting(start, row)
        elif update.state == _DELETE_FINISHED:
            size = cols.size_of(row)
            for epoch, _start in cols.epoch_items(row):
                state = self.epochs[epoch]
                state.remove(row)
                state.size_bytes -= size
                if state.is_empty():
                    del self.epochs[epoch]
            cols.kill(row)
            self.total_size_bytes -= size
            if cols.dead >= COMPACT_MIN and 2 * cols.dead >= len(cols):
                self._compact()

    def _compact(self) -> None:
        remap = self.columns.compact()
        for state in self.epochs.values():
            state.renumber(remap)
        self._memo.clear()

    # ---- reads ----------------------------------------------------------------------------

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The FINISHED segment holding ``offset`` written in ``leader_epoch``, if any."""
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        # state.lookup() and segment_at() inlined: the hot path of every remote fetch.
        i = bisect_right(state.starts, offset)
        if not i or offset > state.ends[i - 1]:
            return None
        row = state.rows[i - 1]
        memo = self._memo
        found = memo.get(row)
        if found is None:
            found = memo[row] = self.columns.metadata(self.topic_id_partition, row)
            # _remember() inlined
            ring = self._memo_ring
            k = self._memo_next
            old = ring[k]
            ring[k] = row
            self._memo_next = (k + 1) % MEMO_SIZE
            if old != row:
                memo.pop(old, None)
            if len(memo) > MEMO_SIZE:
                memo.clear()
        return found

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self.epochs.get(leader_epoch)
        return None if state is None else state.highest_offset

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments (all, or those carrying ``leader_epoch``), sorted by start offset."""
        if leader_epoch is None:
            rows = list(self.columns.live_rows())
        else:
            state = self.epochs.get(leader_epoch)
            if state is None:
                return []
            rows = list(state.all_rows())
        rows.sort(key=self.columns.sort_key)
        return [self.segment_at(r, memo=False) for r in rows]

    def walk_remote_log_segments(
        self,
        states: frozenset[RemoteLogSegmentState] | None = None,
        keep_uuid: Callable[[bytes], bool] | None = None,
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Segments (all, or those in ``states`` whose uuid bytes ``keep_uuid`` keeps) by
        start offset, built one at a time (see
        ``TopicBasedRemoteLogMetadataManager.walk_remote_log_segments``)."""
        for row in self.columns.rows_by_start(states, keep_uuid):
            yield self.segment_at(row, memo=False)

    def walk_segment_summaries(
        self, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> Iterator[SegmentSummary]:
        """Summaries of the segments (all, or those in ``states``) by start offset, read
        from the columns one at a time (see ``rlmm.cache.summary``)."""
        for row in self.columns.rows_by_start(states):
            yield SegmentSummary(self, row)

    def is_referenced(self, row: int, start_offset: int) -> bool:
        """True when a lookup of some offset of ``row``'s segment (starting at
        ``start_offset``) in its leader epoch finds it: the lookup
        ``remote_log_segment_metadata`` does, on the row numbers."""
        epochs = self.epochs
        for epoch, start in self.columns.epoch_items(row):
            state = epochs.get(epoch)
            if state is None:
                continue
            offset = start if start > start_offset else start_offset
            i = bisect_right(state.starts, offset)
            if i and offset <= state.ends[i - 1] and state.rows[i - 1] == row:
                return True
        return False

    def segment_count(self, states: frozenset[RemoteLogSegmentState] | None = None) -> int:
        return self.columns.count_in(states)

    def oldest_max_timestamp_ms(
        self, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> int | None:
        return self.columns.min_max_timestamp(states)

    def contiguous_end_offset(
        self, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> int | None:
        return self.columns.contiguous_end(states)

    def remote_log_size(self, leader_epoch: int | None = None) -> int:
        if leader_epoch is None:
            return self.total_size_bytes
        state = self.epochs.get(leader_epoch)
        return 0 if state is None else state.size_bytes

    def next_segment_with_txn_index(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """First FINISHED segment of the epoch holding offsets >= ``offset`` with a txn index."""
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        flags_of = self.columns.flags_of
        for j in range(max(bisect_right(state.starts, offset) - 1, 0), len(state.starts)):
            row = state.rows[j]
            if state.ends[j] >= offset and not flags_of(row) & TXN_EMPTY:
                return self.segment_at(row)
        return None

    # ---- snapshot state ---------------------------------------------------------------------

    def to_block(self) -> bytes:
        """This state as one encoded block (snapshot format 3); reused until a change.

        The cache then reads the block in place (its arrays are released).
        """
        if self._block is None:
            table = self.columns.table  # row numbers survive encoding: keep the id index
            block = encode_block(
                self.topic_id_partition, self.columns, self.epochs, self.total_size_bytes
            )
            self._adopt(decode_v4(self, block, check=False))
            self.columns.table = table
        assert self._block is not None
        return self._block

    @classmethod
    def from_block(cls, tp: TopicIdPartition, data: bytes) -> RemoteLogMetadataCache:
        """Rebuild from :meth:`to_block` bytes; ``rlmm.cache.BlockError`` if bad."""
        cache = cls(tp)
        cache._adopt(decode_block(cache, data))
        return cache

    def _adopt(self, state: CacheState) -> None:
        """Replace this cache's state by a decoded one."""
        self.columns = state.columns
        self.epochs = state.epochs
        self.total_size_bytes = state.total_size_bytes
        self._memo.clear()
        self._block = state.block

    def to_state(self) -> CacheFields:
        """Snapshot format 1: segments, then per epoch the exact index and sets."""
        cols = self.columns
        segments = [segment_to_state(self.segment_at(r, memo=False)) for r in cols.live_rows()]
        epochs = [
            (
                epoch,
                [(start, cols.uuid_bytes(r)) for start, r in zip(st.starts, st.rows, strict=True)],
                [cols.uuid_bytes(r) for r in st.unreferenced_rows],
                st.highest_offset,
            )
            for epoch, st in self.epochs.items()
        ]
        return segments, epochs

    @classmethod
    def from_state(cls, tp: TopicIdPartition, state: CacheFields) -> RemoteLogMetadataCache:
        """Rebuild from format-1 :meth:`to_state` output (:func:`cache_fields` reads it
        from a snapshot; its values are trusted: from a CRC-checked file)."""
        segments_state, epochs_state = state
        cache = cls(tp)
        load_rows(cache.columns, segments_state)
        cols = cache.columns
        by_uuid = {item[0]: row for row, item in enumerate(segments_state)}
        cache.total_size_bytes = cols.total_size()
        for epoch, index, unreferenced, highest in epochs_state:
            st = cache._new_epoch(epoch)
            st.starts = array("q", [start for start, _ in index])
            st.rows = array("i", [by_uuid[raw] for _, raw in index])
            st.ends = array("q", [_epoch_end(cols, r, epoch) for r in st.rows])
            st.unreferenced_rows = {by_uuid[raw] for raw in unreferenced}
            st.highest_offset = highest
            st.size_bytes = sum(cols.size_of(r) for r in st.all_rows())
        return cache

    def fingerprint(self) -> object:
        """Order-independent view of the whole state, for equality checks in tests/tools."""
        cols = self.columns
        return (
            sorted(
                (segment_to_state(self.segment_at(r, memo=False)) for r in cols.live_rows()),
                key=repr,
            ),
            sorted(
                (
                    epoch,
                    [
                        (s, cols.segment_id(self.topic_id_partition, r).id)
                        for s, r in zip(st.starts, st.rows, strict=True)
                    ],
                    sorted(
                        cols.segment_id(self.topic_id_partition, r).id for r in st.unreferenced_rows
                    ),
                    st.highest_offset,
                    st.size_bytes,
                )
                for epoch, st in self.epochs.items()
            ),
            self.total_size_bytes,
        )


def cache_fields(state: object) -> CacheFields:
    """:meth:`RemoteLogMetadataCache.to_state`'s fields of ``state`` (its tuples, or the
    lists msgpack gives back for them); ValueError if it is not such a state."""
    if not is_fields(state) or len(state) != 2:
        raise ValueError(f"a format-1 cache state is {type(state).__name__}, not 2 fields")
    segments, epochs = state
    if not isinstance(segments, list) or not isinstance(epochs, list):
        raise ValueError("a format-1 cache state holds no lists of segments and epochs")
    return [segment_fields(item) for item in segments], [_epoch_fields(e) for e in epochs]


def _epoch_fields(item: object) -> EpochFields:
    if not is_fields(item) or len(item) != 4:
        raise ValueError(f"a format-1 epoch is {type(item).__name__}, not 4 fields")
    epoch, index, unreferenced, highest = item
    if not (
        type(epoch) is int
        and isinstance(index, list)
        and is_bytes_list(unreferenced)
        and (highest is None or type(highest) is int)
    ):
        raise ValueError(f"epoch {epoch!r}: fields of the wrong types")
    pairs = []
    for pair in index:
        if not is_fields(pair) or len(pair) != 2:
            raise ValueError(f"epoch {epoch}: an index entry is not [start offset, segment]")
        start, raw = pair
        if type(start) is not int or not isinstance(raw, bytes):
            raise ValueError(f"epoch {epoch}: an index entry of the wrong types")
        pairs.append((start, raw))
    return epoch, pairs, unreferenced, highest


def _epoch_end(cols: SegmentColumns, row: int, leader_epoch: int) -> int:
    """Last offset of ``leader_epoch`` inside the segment: the next epoch bounds it."""
    for epoch, start in cols.epoch_items(row):
        if epoch > leader_epoch:
            return start - 1
    return cols.end_of(row)


__all__ = ["CacheFields", "EpochFields", "RemoteLogMetadataCache", "SegmentsView", "cache_fields"]
