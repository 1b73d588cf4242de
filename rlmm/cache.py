"""Per-partition remote log metadata cache (Kafka's RemoteLogMetadataCache).

Invariant: for every leader epoch, ``starts``/``metas`` are the sorted start offsets of
the COPY_SEGMENT_FINISHED segments that serve reads in that epoch (a point lookup is
one bisect); every other segment that carries the epoch (STARTED, DELETE_STARTED,
superseded) is in ``unreferenced``; ``size_bytes`` always equals the summed size of
the segments listed for the epoch, and ``total_size_bytes`` that of all segments, so
size queries are O(1). State changes go through :meth:`RemoteLogMetadataCache.apply`,
which checks the transition first and changes nothing when it is illegal. A cache keeps
the encoded block it was restored from (or last encoded into) until its first change,
so an unchanged partition is written into the next snapshot as the same bytes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Any

from rlmm._cache_block import decode_block, encode_block, segment_to_state, segments_from_state
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


def _epoch_ranges(metadata: RemoteLogSegmentMetadata) -> Iterator[tuple[int, int, int]]:
    """(epoch, first offset, last offset) of each leader epoch inside the segment."""
    items = list(metadata.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(items):
        end = items[i + 1][1] - 1 if i + 1 < len(items) else metadata.end_offset
        yield epoch, start, end


def _epoch_end(metadata: RemoteLogSegmentMetadata, leader_epoch: int) -> int:
    """Last offset of ``leader_epoch`` inside the segment: the next epoch bounds it."""
    for epoch, start in metadata.segment_leader_epochs.items():
        if epoch > leader_epoch:
            return start - 1
    return metadata.end_offset


class RemoteLogLeaderEpochState:
    """Segments of one leader epoch of one partition (Kafka's RemoteLogLeaderEpochState).

    ``metas`` holds the FINISHED segments' metadata objects themselves (not their ids),
    parallel to ``starts``: a point lookup is one bisect and one list access, with no
    further dict lookup on the hot path.
    """

    __slots__ = ("ends", "highest_offset", "metas", "size_bytes", "starts", "unreferenced")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []  # last offset of this epoch inside metas[i]
        self.metas: list[RemoteLogSegmentMetadata] = []
        self.unreferenced: set[RemoteLogSegmentId] = set()
        self.highest_offset: int | None = None
        self.size_bytes = 0

    def is_empty(self) -> bool:
        return not self.starts and not self.unreferenced

    def floor(self, offset: int) -> RemoteLogSegmentMetadata | None:
        i = bisect_right(self.starts, offset)
        return self.metas[i - 1] if i else None

    def lookup(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The segment whose range of this epoch holds ``offset`` (bisect + bound check)."""
        i = bisect_right(self.starts, offset)
        return self.metas[i - 1] if i and offset <= self.ends[i - 1] else None

    def segment_ids(self) -> Iterator[RemoteLogSegmentId]:
        for m in self.metas:
            yield m.remote_log_segment_id
        yield from self.unreferenced

    def add_started(self, segment_id: RemoteLogSegmentId) -> None:
        self.unreferenced.add(segment_id)

    def add_finished(self, start: int, metadata: RemoteLogSegmentMetadata, epoch_end: int) -> None:
        # A leader that re-uploads a range (after a leader change) supersedes every
        # mapping that starts at or after its start, as long as it reaches at least as
        # far as what this epoch already had: those segments stay listed, unreferenced.
        while (
            self.starts
            and self.starts[-1] >= start
            and self.highest_offset is not None
            and self.highest_offset <= epoch_end
        ):
            self.starts.pop()
            self.ends.pop()
            self.unreferenced.add(self.metas.pop().remote_log_segment_id)
        i = bisect_left(self.starts, start)
        if i < len(self.starts) and self.starts[i] == start:
            self.unreferenced.add(self.metas[i].remote_log_segment_id)
            self.metas[i] = metadata
            self.ends[i] = epoch_end
        else:
            self.starts.insert(i, start)
            self.ends.insert(i, epoch_end)
            self.metas.insert(i, metadata)
        self.unreferenced.discard(metadata.remote_log_segment_id)
        if self.highest_offset is None or epoch_end > self.highest_offset:
            self.highest_offset = epoch_end

    def _index_of(self, start: int, segment_id: RemoteLogSegmentId) -> int:
        i = bisect_left(self.starts, start)
        if (
            i < len(self.starts)
            and self.starts[i] == start
            and self.metas[i].remote_log_segment_id == segment_id
        ):
            return i
        return -1

    def replace(self, start: int, metadata: RemoteLogSegmentMetadata) -> None:
        """Point the index at a newer copy of the same segment (idempotent update)."""
        i = self._index_of(start, metadata.remote_log_segment_id)
        if i >= 0:
            self.metas[i] = metadata

    def mark_deleting(self, start: int, segment_id: RemoteLogSegmentId) -> None:
        i = self._index_of(start, segment_id)
        if i >= 0:
            del self.starts[i]
            del self.ends[i]
            del self.metas[i]
        self.unreferenced.add(segment_id)

    def remove(self, segment_id: RemoteLogSegmentId) -> None:
        self.unreferenced.discard(segment_id)


class RemoteLogMetadataCache:
    """All remote segments of one user partition, indexed per leader epoch."""

    __slots__ = ("_block", "epochs", "segments", "topic_id_partition", "total_size_bytes")

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self.topic_id_partition = topic_id_partition
        self.segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, RemoteLogLeaderEpochState] = {}
        self.total_size_bytes = 0
        self._block: bytes | None = None  # encoded copy of this exact state, if known

    # ---- validation (no side effects) -------------------------------------------------

    def check_add(self, metadata: RemoteLogSegmentMetadata) -> None:
        segment_id = metadata.remote_log_segment_id
        if metadata.state != _STARTED:
            raise InvalidStateTransitionError(
                f"a new segment must be added in COPY_SEGMENT_STARTED, got {metadata.state.name}"
                f" for {segment_id}"
            )
        existing = self.segments.get(segment_id)
        if existing is not None:
            raise InvalidStateTransitionError(
                f"segment {segment_id} already exists (state {existing.state.name})"
            )

    def check_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        segment_id = update.remote_log_segment_id
        existing = self.segments.get(segment_id)
        if existing is None:
            raise RemoteResourceNotFoundError(f"no remote log segment {segment_id}")
        check_segment_transition(existing.state, update.state, segment_id)
        return existing

    # ---- state changes ----------------------------------------------------------------

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.check_add(metadata)
        self._block = None
        segment_id = metadata.remote_log_segment_id
        self.segments[segment_id] = metadata
        self.total_size_bytes += metadata.segment_size_in_bytes
        for epoch in metadata.segment_leader_epochs:
            state = self.epochs.get(epoch)
            if state is None:
                state = self.epochs[epoch] = RemoteLogLeaderEpochState()
            state.add_started(segment_id)
            state.size_bytes += metadata.segment_size_in_bytes

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        existing = self.check_update(update)
        self._block = None
        updated = existing.create_with_updates(update)
        segment_id = update.remote_log_segment_id
        if update.state == existing.state:
            # Idempotent retry: only the event's timestamp/broker/custom metadata move.
            self.segments[segment_id] = updated
            if update.state == _FINISHED:
                for epoch, start, _end in _epoch_ranges(updated):
                    self.epochs[epoch].replace(start, updated)
            return
        if update.state == _FINISHED:
            for epoch, start, end in _epoch_ranges(updated):
                self.epochs[epoch].add_finished(start, updated, end)
            self.segments[segment_id] = updated
        elif update.state == _DELETE_STARTED:
            for epoch, start, _end in _epoch_ranges(updated):
                self.epochs[epoch].mark_deleting(start, segment_id)
            self.segments[segment_id] = updated
        elif update.state == _DELETE_FINISHED:
            size = updated.segment_size_in_bytes
            for epoch in updated.segment_leader_epochs:
                state = self.epochs[epoch]
                state.remove(segment_id)
                state.size_bytes -= size
                if state.is_empty():
                    del self.epochs[epoch]
            del self.segments[segment_id]
            self.total_size_bytes -= size

    # ---- reads ----------------------------------------------------------------------------

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The FINISHED segment holding ``offset`` written in ``leader_epoch``, if any."""
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        return state.lookup(offset)

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self.epochs.get(leader_epoch)
        return None if state is None else state.highest_offset

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments (all, or those carrying ``leader_epoch``), sorted by start offset."""
        if leader_epoch is None:
            found = list(self.segments.values())
        else:
            state = self.epochs.get(leader_epoch)
            if state is None:
                return []
            found = [self.segments[s] for s in state.segment_ids()]
        found.sort(key=_sort_key)
        return found

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
        for j in range(max(bisect_right(state.starts, offset) - 1, 0), len(state.starts)):
            metadata = state.metas[j]
            if state.ends[j] >= offset and not metadata.txn_index_empty:
                return metadata
        return None

    # ---- snapshot state ---------------------------------------------------------------------

    def to_block(self) -> bytes:
        """This state as one encoded block (snapshot format 2); reused until a change."""
        if self._block is None:
            self._block = encode_block(self)
        return self._block

    @classmethod
    def from_block(cls, tp: TopicIdPartition, data: bytes) -> RemoteLogMetadataCache:
        """Rebuild from :meth:`to_block` bytes; ``rlmm._cache_block.BlockError`` if bad."""
        cache = cls(tp)
        decode_block(tp, data, cache)
        cache._block = data
        return cache

    def to_state(self) -> list[Any]:
        """Snapshot format 1: segments, then per epoch the exact index and sets."""
        segments = [_segment_to_state(m) for m in self.segments.values()]
        epochs = [
            [
                epoch,
                [
                    [start, m.remote_log_segment_id.id.bytes]
                    for start, m in zip(st.starts, st.metas, strict=True)
                ],
                [sid.id.bytes for sid in st.unreferenced],
                st.highest_offset,
            ]
            for epoch, st in self.epochs.items()
        ]
        return [segments, epochs]

    @classmethod
    def from_state(cls, tp: TopicIdPartition, state: list[Any]) -> RemoteLogMetadataCache:
        """Rebuild from format-1 :meth:`to_state` output (trusted: from a CRC-checked file)."""
        segments_state, epochs_state = state
        cache = cls(tp)
        sids, metas = segments_from_state(tp, segments_state)
        by_uuid = {item[0]: sid for item, sid in zip(segments_state, sids, strict=True)}
        segments = cache.segments
        segments.update(zip(sids, metas, strict=True))
        cache.total_size_bytes = sum(m.segment_size_in_bytes for m in metas)
        for epoch, index, unreferenced, highest in epochs_state:
            st = RemoteLogLeaderEpochState()
            st.starts = [start for start, _ in index]
            st.metas = [segments[by_uuid[raw]] for _, raw in index]
            st.ends = [_epoch_end(m, epoch) for m in st.metas]
            st.unreferenced = {by_uuid[raw] for raw in unreferenced}
            st.highest_offset = highest
            st.size_bytes = sum(segments[s].segment_size_in_bytes for s in st.segment_ids())
            cache.epochs[epoch] = st
        return cache

    def fingerprint(self) -> Any:
        """Order-independent view of the whole state, for equality checks in tests/tools."""
        return (
            sorted((_segment_to_state(m) for m in self.segments.values()), key=repr),
            sorted(
                (
                    epoch,
                    list(
                        zip(st.starts, (m.remote_log_segment_id.id for m in st.metas), strict=True)
                    ),
                    sorted(s.id for s in st.unreferenced),
                    st.highest_offset,
                    st.size_bytes,
                )
                for epoch, st in self.epochs.items()
            ),
            self.total_size_bytes,
        )


def _sort_key(metadata: RemoteLogSegmentMetadata) -> tuple[int, int, int]:
    return (metadata.start_offset, metadata.end_offset, metadata.remote_log_segment_id.id.int)


_segment_to_state = segment_to_state


