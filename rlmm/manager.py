"""TopicBasedRemoteLogMetadataManager: the RLMM over a partitioned event log.

Invariants:
- every metadata partition in ``_applied`` is being (or is about to be) consumed, and
  the store holds exactly the effect of its events up to ``_applied[p]``; events at
  or below that offset are never applied twice (replays are idempotent);
- a write returns only after this manager's own apply loop has applied the offset it
  was published at (read-your-writes); waiters are futures completed by the apply
  loop, never polled; an event the apply loop rejects fails its writer;
- reads are plain synchronous cache lookups: an unassigned partition raises
  RemoteResourceNotFoundError, an assigned one that has not caught up to the end
  offset seen at assignment raises RemoteStorageNotReadyError.

The manager assigns partitions, publishes writes and answers reads; its parts keep
one job each: the apply loops (rlmm.apply_loops), the waits for an applied offset and
the rejections writers learn of (rlmm.applied_waits), the snapshots
(rlmm.snapshot_keeper) and the counters (rlmm.manager_stats).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from eventlog import EventLog, EventLogError
from eventlog.errors import EventLogAuthError
from rlmm.applied_waits import AppliedWaits, Rejections
from rlmm.apply_loops import ApplyLoops
from rlmm.cache import RemoteLogMetadataCache, SegmentSummary
from rlmm.codec import encode
from rlmm.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    RemoteStorageTimeoutError,
    SnapshotBlockError,
)
from rlmm.manager_stats import ManagerStats
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
    is_rlmm_segment_uuid,
)
from rlmm.offload_metadata import OffloadMetadataManager
from rlmm.partitioning import metadata_partition_for
from rlmm.replay import MetadataReplay
from rlmm.snapshot_keeper import SnapshotKeeper
from rlmm.snapshotting import SnapshotPolicy, Snapshotter

log = logging.getLogger(__name__)


def _unsigned(raw: bytes) -> bool:
    """The uuid bytes ``raw`` lack rlmm's signature (a segment another writer named)."""
    return not is_rlmm_segment_uuid(raw)


@dataclass(slots=True)
class _Assignment:
    metadata_partition: int
    ready_offset: int  # applied offset at which the partition is caught up


class TopicBasedRemoteLogMetadataManager(OffloadMetadataManager):
    """KIP-405 RemoteLogMetadataManager whose source of truth is an EventLog."""

    def __init__(
        self,
        event_log: EventLog,
        *,
        write_timeout_s: float = 30.0,
        snapshot_policy: SnapshotPolicy | None = None,
        close_event_log: bool = True,
    ) -> None:
        """``close_event_log``: the manager owns the log it starts and closes it in
        :meth:`close`; pass False for a log shared with other managers (its owner then
        closes it)."""
        self._log = event_log
        self._n = event_log.partition_count
        self._write_timeout_s = write_timeout_s
        self._close_log = close_event_log
        self.stats = ManagerStats()
        self._rejections = Rejections(self.stats)
        # Records become state in the replay; its store and applied offsets, named here.
        self._replay = MetadataReplay(self._n, self.stats, rejected=self._rejections.remember)
        self._store = self._replay.store
        self._applied = self._replay.applied
        self._waits = AppliedWaits(self._applied)
        self._snapshotter = (
            Snapshotter(snapshot_policy, self._n, event_log)
            if snapshot_policy is not None
            else None
        )
        self._snapshots = SnapshotKeeper(self._snapshotter, self._replay, self.stats)
        self._loops = ApplyLoops(event_log, self._replay, self.stats, self._waits, self._snapshots)
        # the loops' own dict (metadata partition -> its apply loop), named here
        self._consumers = self._loops.tasks
        self._denied_assignments: dict[TopicIdPartition, str] = {}
        self._assigned: dict[TopicIdPartition, _Assignment] = {}
        self._started = False
        self._closed = False

    # ---- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start the event log and seed the cache from the newest valid snapshot."""
        if self._started:
            return
        await self._snapshots.restore_while(self._log.start())
        self._started = True

    async def close(self) -> None:
        """Stop the apply loops, take a final snapshot, fail pending writers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._loops.stop_all()
        await self._snapshots.take_last(self._started)
        self._waits.fail(None, RemoteStorageError("the remote log metadata manager was closed"))
        if self._close_log:
            await self._log.close()

    async def __aenter__(self) -> TopicBasedRemoteLogMetadataManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise RemoteStorageError("the remote log metadata manager is closed")
        if not self._started:
            raise RemoteStorageNotReadyError(
                message="the remote log metadata manager is not started"
            )

    # ---- assignment -----------------------------------------------------------------------

    async def on_partition_leadership_changes(
        self,
        leader_partitions: Iterable[TopicIdPartition],
        follower_partitions: Iterable[TopicIdPartition],
    ) -> None:
        """Assign user partitions; each becomes ready once its metadata partition catches up."""
        self._ensure_open()
        new = [tp for tp in {*leader_partitions, *follower_partitions} if tp not in self._assigned]
        if not new:
            return
        by_partition = {tp: metadata_partition_for(tp, self._n) for tp in new}
        needed = set(by_partition.values())
        try:
            ends = await self._log.end_offsets(sorted(needed))
        except EventLogAuthError as e:
            # Fail closed: not assigned (the next leadership change tries again), not
            # ready, and every question about them answered with this reason.
            log.error("cannot assign %d partition(s): %s", len(new), e)
            for tp in new:
                self._denied_assignments[tp] = str(e)
            return
        for tp in new:
            self._denied_assignments.pop(tp, None)
        for p in needed:
            if p not in self._consumers:
                self._replay.check_end(p, ends[p])  # a snapshot ahead of the log: replay it
        for tp, p in by_partition.items():
            self._assigned[tp] = _Assignment(p, ends[p] - 1)
        for p in needed:
            if p not in self._consumers:
                self._loops.start(p)

    async def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Unassign user partitions; a metadata partition no one needs is dropped."""
        self._ensure_open()
        for tp in partitions:
            self._assigned.pop(tp, None)
            self._denied_assignments.pop(tp, None)
        still_needed = {a.metadata_partition for a in self._assigned.values()}
        for p in [p for p in self._consumers if p not in still_needed]:
            await self._loops.stop(p)
            self._replay.forget(p)
            self._waits.fail(p, RemoteResourceNotFoundError(f"metadata partition {p} was stopped"))

    def is_ready(self, tp: TopicIdPartition) -> bool:
        a = self._assigned.get(tp)
        return a is not None and self._applied.get(a.metadata_partition, -1) >= a.ready_offset

    def not_ready_reason(self, tp: TopicIdPartition) -> str | None:
        """Why ``tp`` is not ready (None when it is): not assigned, catching up, or denied."""
        a = self._assigned.get(tp)
        if a is None:
            return self._denied_assignments.get(tp, f"{tp} is not assigned to this manager")
        if self.is_ready(tp):
            return None
        denied = self._loops.denied.get(a.metadata_partition)
        if denied is not None:
            return denied
        return (
            f"catching up on metadata partition {a.metadata_partition}: applied up to"
            f" {self._applied.get(a.metadata_partition, -1)}, ready at {a.ready_offset}"
        )

    async def wait_until_ready(self, tps: Iterable[TopicIdPartition], timeout_s: float) -> None:
        """Wait until every given (assigned) partition is ready, or raise a timeout error."""
        waits = []
        for tp in tps:
            a = self._assigned.get(tp)
            if a is None and tp in self._denied_assignments:
                raise RemoteStorageNotReadyError(tp, self._denied_assignments[tp])
            if a is None:
                raise RemoteResourceNotFoundError(f"{tp} is not assigned to this manager")
            waits.append(self._waits.wait(a.metadata_partition, a.ready_offset))
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout_s)
        except TimeoutError as e:
            raise RemoteStorageTimeoutError(
                f"partitions not ready within {timeout_s}s: "
                + "; ".join(
                    f"{tp} ({self.not_ready_reason(tp)})" for tp in tps if not self.is_ready(tp)
                )
            ) from e

    # ---- writes ---------------------------------------------------------------------------

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Publish a new segment (COPY_SEGMENT_STARTED); returns once applied locally."""
        await self._publish(metadata)

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        """Publish a state change of a known segment; returns once applied locally."""
        await self._publish(update)

    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        """Publish a partition delete state; returns once applied locally."""
        await self._publish(metadata)

    async def _publish(self, event: RemoteLogMetadata) -> None:
        self._ensure_open()
        tp = event.topic_id_partition
        if (
            isinstance(event, RemoteLogSegmentMetadata)
            and event.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED
        ):
            # A caller bug whatever the partition's state: say so before anything else.
            raise InvalidStateTransitionError(
                f"a new segment must be added in COPY_SEGMENT_STARTED, got {event.state.name}"
                f" for {event.remote_log_segment_id}"
            )
        p = self._ready_assignment(tp).metadata_partition
        try:
            self._store.check(event)
        except SnapshotBlockError as e:
            self._loops.replay_from_log(p, e)
            raise
        try:
            offset = await self._log.append(p, encode(event))
        except EventLogError as e:
            # Translated at the boundary: callers handle RemoteStorageError only.
            error = RemoteStorageError(
                f"publishing an event for {tp} to metadata partition {p} failed: {e}"
            )
            error.retriable = e.retriable
            raise error from e
        try:
            # asyncio.timeout, not wait_for: no extra task per write on the hot path.
            async with asyncio.timeout(self._write_timeout_s):
                await self._waits.wait(p, offset)
        except TimeoutError as e:
            raise RemoteStorageTimeoutError(
                f"event for {tp} was published at metadata partition {p} offset {offset} but not"
                f" applied within {self._write_timeout_s}s"
            ) from e
        rejection = self._rejections.take(p, offset)
        if rejection is not None:
            raise rejection

    # ---- snapshots ------------------------------------------------------------------------

    async def snapshot(self) -> None:
        """Take a snapshot now (in addition to the policy's schedule)."""
        self._ensure_open()
        await self._snapshots.take()

    # ---- reads ----------------------------------------------------------------------------

    def _ready_assignment(self, tp: TopicIdPartition) -> _Assignment:
        a = self._assigned.get(tp)
        if a is None:
            self._ensure_open()
            if tp in self._denied_assignments:
                raise RemoteStorageNotReadyError(tp, self._denied_assignments[tp])
            raise RemoteResourceNotFoundError(f"{tp} is not assigned to this manager")
        if self._applied.get(a.metadata_partition, -1) < a.ready_offset:
            denied = self._loops.denied.get(a.metadata_partition)
            raise RemoteStorageNotReadyError(tp, denied)
        return a

    def _cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache | None:
        self._ready_assignment(tp)
        if self._store.is_deleted(tp):
            raise RemoteResourceNotFoundError(f"{tp} was deleted from remote storage")
        try:
            return self._store.caches.get(tp)
        except SnapshotBlockError as e:
            self._loops.replay_from_log(metadata_partition_for(tp, self._n), e)
            raise

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        # Fast path (every remote fetch): an assigned, caught-up partition, decoded, with
        # no partition delete state: _cache()'s checks without its four calls. Anything
        # else takes _cache(), which decides (and raises) exactly as before.
        a = self._assigned.get(tp)
        if (
            a is not None
            and self._applied.get(a.metadata_partition, -1) >= a.ready_offset
            and tp not in self._store.delete_states
        ):
            hot = self._store.caches.hot.get(tp)
            if hot is not None:
                return hot.remote_log_segment_metadata(leader_epoch, offset)
        cache = self._cache(tp)
        return None if cache is None else cache.remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        cache = self._cache(tp)
        return None if cache is None else cache.highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        cache = self._cache(tp)
        return [] if cache is None else cache.list_remote_log_segments(leader_epoch)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int | None = None) -> int:
        cache = self._cache(tp)
        return 0 if cache is None else cache.remote_log_size(leader_epoch)

    def walk_remote_log_segments(
        self,
        tp: TopicIdPartition,
        states: frozenset[RemoteLogSegmentState] | None = None,
        *,
        unsigned_only: bool = False,
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """The segments of ``tp`` (all, or those in ``states``; with ``unsigned_only``,
        only those whose id lacks rlmm's signature) by start offset, then end offset, each
        built as the walk reaches it: a caller that scans a large archive every round (the
        offloader) holds one object at a time, not a list of them all. Walk it to the end,
        or drop it, before the next ``await``: the walk follows the cache's rows as they
        were when it started."""
        cache = self._cache(tp)
        if cache is None:
            return iter(())
        keep = _unsigned if unsigned_only else None
        return cache.walk_remote_log_segments(states, keep)

    def walk_segment_summaries(
        self, tp: TopicIdPartition, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> Iterator[SegmentSummary]:
        """As ``walk_remote_log_segments``, but each segment as a ``SegmentSummary``:
        state, offsets, max timestamp, size and whether a lookup still finds it, read from
        the cache's columns (``metadata()`` builds the full object, before the next
        ``await``). What the offloader's expiry reads of every kept segment each round."""
        cache = self._cache(tp)
        return iter(()) if cache is None else cache.walk_segment_summaries(states)

    def remote_log_segment_count(
        self, tp: TopicIdPartition, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> int:
        """len(list_remote_log_segments(tp)) (of the segments in ``states``, if given),
        without making the segments' metadata."""
        cache = self._cache(tp)
        return 0 if cache is None else cache.segment_count(states)

    def oldest_max_timestamp_ms(
        self, tp: TopicIdPartition, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> int | None:
        """The smallest max timestamp among ``tp``'s segments (in ``states``, if given),
        read from the cache's columns; None when there is no such segment."""
        cache = self._cache(tp)
        return None if cache is None else cache.oldest_max_timestamp_ms(states)

    def contiguous_end_offset(
        self, tp: TopicIdPartition, states: frozenset[RemoteLogSegmentState] | None = None
    ) -> int | None:
        """The end offset that ``tp``'s segments (in ``states``, if given), taken by start
        offset from the lowest, reach before their first gap; None when there is none."""
        cache = self._cache(tp)
        return None if cache is None else cache.contiguous_end_offset(states)

    def next_segment_with_txn_index(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        cache = self._cache(tp)
        return None if cache is None else cache.next_segment_with_txn_index(leader_epoch, offset)

    def remote_partition_delete_state(
        self, tp: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        self._ready_assignment(tp)
        return self._store.delete_states.get(tp)

    # ---- introspection ------------------------------------------------------------------------

    @property
    def applied_offsets(self) -> dict[int, int]:
        return dict(self._applied)

    def applied_offset_of(self, tp: TopicIdPartition) -> int | None:
        """The offset applied so far in ``tp``'s metadata partition (None: not assigned).
        Every change of ``tp``'s metadata is an event applied there, so while this value
        holds, ``tp``'s metadata has not changed."""
        a = self._assigned.get(tp)
        return None if a is None else self._applied.get(a.metadata_partition)

    async def applied_moved(self) -> None:
        await asyncio.shield(self._waits.moved())

    def metadata_position_of(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        a = self._assigned.get(tp)
        if a is None:
            return None
        return a.metadata_partition, self._applied.get(a.metadata_partition, -1)

    @property
    def assigned_partitions(self) -> set[TopicIdPartition]:
        return set(self._assigned)

    def fingerprint(self, tps: Iterable[TopicIdPartition] | None = None) -> object:
        """Order-independent view of the cached state (for convergence checks)."""
        return self._store.fingerprint(tps)
