"""RemoteLogManager: the broker side of tiered storage (Kafka's RemoteLogManager).

One per broker. It owns the RLMM assignment and, per leader partition, a task that
runs a copy round then an expiration round every ``task_interval_s``; followers get
metadata only. ``copy_round`` / ``expire_round`` run one round directly.

Invariants:
- per partition, rounds never overlap (one lock each), segments are copied in offset
  order, and a segment that cannot be copied stops that partition's round (copying a
  later one would leave a hole in the remote lineage); other partitions go on;
- at most ``copier_concurrency`` segment copies run at once across partitions, and
  every RSM or file call runs in a worker thread;
- on becoming leader, copies left in COPY_SEGMENT_STARTED and deletions left in
  DELETE_SEGMENT_STARTED by an earlier attempt of this broker are deleted before any
  new copy; another broker's are deleted only once older than ``leftover_grace_s``
  (the old leader may still be finishing it: a FINISHED that lands before our
  DELETE_SEGMENT_STARTED would make that delete remove a finished copy);
- the copy continues after the highest remote offset of the lineage, or, when a
  finished copy below it is missing (a hole, e.g. a cleanup that raced a copy
  finishing) and the local log still holds the hole's start, from the hole: the
  archive heals what it lost instead of keeping a gap;
- offsets the local log lost before they were copied (the broker's retention knows
  nothing of the sidecar) are reported once per gap (an error, a counter), never
  silently skipped over;
- only segments rlmm wrote are deleted or cleaned up (``Ownership``); a segment
  another writer left (Kafka's own RemoteLogManager) is never touched;
- ``abandon(tp)`` (leadership lost) cancels the partition's round: a copy in flight
  is abandoned and its objects deleted before it returns, and no new segment starts;
- the unarchived tail (offsets and bytes after the archive's end, the active segment
  included, and the age of the newest archived record) is exported for the partitions
  led here only, set by every copy and expiration round and dropped with leadership;
- a segment holding records off the leader's epoch lineage (an unclean election cut
  them) is deleted once the local log still holds what it served on the lineage;
- nothing started here outlives ``close()``; cancellation is never swallowed;
- the metadata is any ``OffloadMetadataManager`` (the topic-based manager, or the
  fail-closed facade in front of it): while it is not ready (a ``NotReadyRlmm`` swapped
  in) nothing is copied or expired, and a copy that meets it mid-way fails and deletes
  its objects; the next ready manager's round cleans up what the failed attempt left;
- a segment the topic's copy delay holds back (KIP-1241, ``copy_delay``) is not
  copied, nor any after it, and is not copy lag; the partition's round is skipped as
  idle until the delay lets it go by time (or its inputs change);
- ``run_round`` skips a partition whose last round did nothing while its inputs are
  unchanged (the source's ``change_token``, its metadata's applied offset, its settings)
  and no retention.ms deadline of its segments has passed: that round would do nothing
  again, and a round over thousands of idle partitions must not read them all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from remote import RemoteStorageManager
from rlmm.cache import SegmentSummary
from rlmm.errors import RemoteResourceNotFoundError
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.offload.blocking import run_blocking
from rlmm.offload.copy_delay import CopyDelay, HeldBack, hold_back
from rlmm.offload.errors import ForeignSegmentError, OffloadError, SegmentCopyError
from rlmm.offload.expiry import Lineage, Victim, plan_expiry
from rlmm.offload.faults import KillPoints
from rlmm.offload.log_source import (
    EpochStart,
    LocalSegment,
    LogSource,
    LogView,
    epoch_end_offsets,
)
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.ownership import Ownership
from rlmm.offload.quota import CopyQuota
from rlmm.offload.segment_ops import OffloadEvent, SegmentOps
from rlmm.offload_metadata import OffloadMetadataManager

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
_FINISHED_STATE = frozenset({S.COPY_SEGMENT_FINISHED})
_STARTED_STATES = frozenset({S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED})
_UNFINISHED_STATES = frozenset(set(S) - {S.COPY_SEGMENT_FINISHED})


def _served(summary: SegmentSummary) -> bool:
    """A lookup of some offset of the segment still finds it (expiry's ``referenced``)."""
    return summary.referenced


@dataclass
class CopyResult:
    """What one copy round of one partition did."""

    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    bytes: int = 0
    pending: int = 0  # eligible segments left (stop requested, or an error)
    error: SegmentCopyError | None = None
    skipped_expired: int = 0  # past retention.ms already: the same round would delete them
    round_failure: BaseException | None = None  # the whole round of the partition failed
    abandoned: bool = False  # leadership was lost during the round: it stopped there
    offsets_missed: int = 0  # deleted from the local log before they were copied
    held_back: int = 0  # rolled segments the copy delay (KIP-1241) keeps for later
    held_until_ms: int | None = None  # when the first of them is old enough (None: not by time)


@dataclass
class ExpireResult:
    """What one expiration round of one partition did."""

    deleted: list[Victim] = field(default_factory=list)
    cleaned: int = 0  # DELETE_SEGMENT_STARTED leftovers finished
    kept_off_lineage: int = 0  # off the lineage, but the local log no longer holds their start


def _read_range(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int, end: int | None
) -> bytes:
    with rsm.fetch_log_segment(metadata, start, end) as stream:
        return stream.read()


@dataclass
class _Leader:
    source: LogSource
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    revoked: bool = False  # leadership lost: start no new segment
    # (inputs, until ms): the last round did nothing; with the same inputs before that
    # time the next one would not either (see run_round)
    idle: tuple[Hashable, int] | None = None
    # The highest offset whose absence from the archive is already accounted for:
    # reported missed (deleted locally before it was copied) or skipped as past
    # retention.ms. A gap is reported once, however many rounds see it.
    accounted_through: int = -1
    # The highest offset this process saw archived: retention may since have expired
    # every segment, and a gap after an emptied archive is still a miss.
    archived_through: int = -1
    # (base offset, size, largest timestamp) of the segment the copy delay held back
    # last: a rolled segment never changes, and the next round asks of the same one.
    held: tuple[int, int, int | None] | None = None


class RemoteLogManager:
    """Copies rolled segments to remote storage and expires them, per leader partition."""

    def __init__(
        self,
        manager: OffloadMetadataManager,
        rsm: RemoteStorageManager,
        *,
        broker_id: int = 0,
        copier_concurrency: int = 4,
        task_interval_s: float = 30.0,
        ready_timeout_s: float = 120.0,
        copy_attempts: int = 3,
        retry_backoff_s: float = 0.5,
        metrics: OffloadMetrics | None = None,
        listener: Callable[[OffloadEvent], None] | None = None,
        clock_ms: Callable[[], int] | None = None,
        kill_points: KillPoints | None = None,
        leftover_grace_s: float | None = None,
        copy_quota: CopyQuota | None = None,
    ) -> None:
        if copier_concurrency <= 0:
            raise OffloadError(f"copier concurrency must be positive, got {copier_concurrency}")
        self.manager = manager
        self.rsm = rsm
        self.metrics = metrics if metrics is not None else OffloadMetrics()
        self._clock_ms = clock_ms if clock_ms is not None else (lambda: int(time.time() * 1000))
        self.ownership = Ownership(rsm)
        self._ops = SegmentOps(
            manager,
            rsm,
            broker_id,
            self.metrics,
            # RSM calls beyond the copies: deletes and fetches share the same threads.
            asyncio.Semaphore(copier_concurrency + 2),
            self.ownership,
            kill_points if kill_points is not None else KillPoints(),
            listener,
            self._clock_ms,
        )
        self._copy_slots = asyncio.Semaphore(copier_concurrency)
        self.copy_quota = copy_quota if copy_quota is not None else CopyQuota()
        self._file_slots = asyncio.Semaphore(copier_concurrency + 2)
        self._task_interval_s = task_interval_s
        # Long enough for an old leader to learn it lost leadership and abandon its copy.
        self._leftover_grace_ms = int(
            1000 * (leftover_grace_s if leftover_grace_s is not None else 10 * task_interval_s)
        )
        self._ready_timeout_s = ready_timeout_s
        self._copy_attempts = copy_attempts
        self._retry_backoff_s = retry_backoff_s
        self._leaders: dict[TopicIdPartition, _Leader] = {}
        self._followers: set[TopicIdPartition] = set()
        self._rounds: dict[TopicIdPartition, asyncio.Task[tuple[CopyResult, ExpireResult]]] = {}
        self._warned_foreign: set[object] = set()
        # partition -> its metadata's applied offset when no foreign segment was found
        self._no_foreign: dict[TopicIdPartition, int] = {}
        self._stopping = False
        self._closed = False

    @property
    def leaders(self) -> list[TopicIdPartition]:
        return list(self._leaders)

    @property
    def followers(self) -> list[TopicIdPartition]:
        return list(self._followers)

    @property
    def followed(self) -> AbstractSet[TopicIdPartition]:
        """The partitions followed (a view: do not change it)."""
        return self._followers

    def leads(self, source: LogSource) -> bool:
        """True when ``source``'s partition is led through this very source and its
        metadata is ready: ``on_leadership_changes`` would change nothing for it."""
        tp = source.topic_id_partition
        leader = self._leaders.get(tp)
        return leader is not None and leader.source is source and self.manager.is_ready(tp)

    @property
    def broker_id(self) -> int:
        return self._ops.broker_id

    def set_listener(self, listener: Callable[[OffloadEvent], None] | None) -> None:
        self._ops.listener = listener

    # ---- leadership -----------------------------------------------------------------------

    async def on_leadership_changes(
        self,
        leaders: Iterable[LogSource],
        followers: Iterable[TopicIdPartition] = (),
        *,
        start_tasks: bool = True,
    ) -> None:
        """Lead ``leaders`` (clean up leftovers, then start their tasks); follow ``followers``."""
        self._check_open()
        sources = {s.topic_id_partition: s for s in leaders}
        follow = set(followers) - set(sources)
        for tp in follow & set(self._leaders):
            await self._stop_task(self._leaders.pop(tp))
            self.metrics.clear_unarchived(tp)
        await self.manager.on_partition_leadership_changes(list(sources), list(follow))
        # Each round leads every partition again: only those not ready yet are waited on.
        waiting = [tp for tp in sources if not self.manager.is_ready(tp)]
        await self.manager.wait_until_ready(waiting, self._ready_timeout_s)
        self._followers |= follow
        self._followers -= set(sources)
        fresh = []
        for tp, source in sources.items():
            leader = self._leaders.get(tp)
            if leader is None:
                leader = self._leaders[tp] = _Leader(source)
                fresh.append(tp)
                self.metrics.init_topic(tp.topic)
            leader.source = source
        results = await asyncio.gather(*(self._cleanup(tp) for tp in fresh), return_exceptions=True)
        for tp, result in zip(fresh, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            if isinstance(result, Exception):
                log.warning("crash cleanup of %s failed (retried next round): %s", tp, result)
            elif self.manager.is_ready(tp):
                # From the metadata, now: a first round over a backlog sets it only
                # once its copies are done, and dashboards would show a gap until then.
                self._record_remote_size(tp)
        if start_tasks:
            for tp in sources:
                leader = self._leaders[tp]
                if leader.task is None:
                    leader.task = asyncio.create_task(self._run(tp), name=f"rlm-{tp}")

    async def stop_partitions(
        self, partitions: Iterable[TopicIdPartition], *, delete: bool = False
    ) -> None:
        """Stop leading or following ``partitions``; ``delete`` removes them from remote storage."""
        self._check_open()
        tps = list(partitions)
        for tp in tps:
            leader = self._leaders.get(tp)
            if leader is not None:
                await self._stop_task(leader)
        if delete:
            for tp in tps:
                await self.delete_partition(tp)
        for tp in tps:
            self._leaders.pop(tp, None)
            self._followers.discard(tp)
            self._no_foreign.pop(tp, None)
            self.metrics.clear_unarchived(tp)
        await self.manager.on_stop_partitions(tps)

    async def _stop_task(self, leader: _Leader) -> None:
        leader.revoked = True
        tp = leader.source.topic_id_partition
        for task in (leader.task, self._rounds.get(tp)):
            if task is not None and not task.done():
                task.cancel()
                # asyncio.wait, not ``await task`` under suppress(CancelledError): a
                # cancellation of the caller itself must propagate, never be swallowed.
                await asyncio.wait([task])
        leader.task = None

    async def abandon(self, tps: Iterable[TopicIdPartition]) -> None:
        """Leadership of ``tps`` was lost: cancel their rounds now (a copy in flight is
        abandoned and its objects deleted before this returns) and stop leading them
        (their metadata stays followed)."""
        self._check_open()
        lost = [tp for tp in tps if tp in self._leaders]
        for tp in lost:
            log.info("%s: leadership lost: stopping its copy and expiration", tp)
            await self._stop_task(self._leaders.pop(tp))
            self._followers.add(tp)
            self.metrics.clear_unarchived(tp)

    async def foreign_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The segments of ``tp`` in the metadata that rlmm did not write."""
        # The sidecar asks this of every partition each round: while the metadata is
        # unchanged since a check found none, there is none (a segment rlmm wrote stays
        # rlmm's; a new segment is a new event).
        applied = self.manager.applied_offset_of(tp)
        if applied is not None and self._no_foreign.get(tp) == applied:
            return []
        # A signed id is rlmm's without a look at the store; only the others are asked.
        unsigned = list(self.manager.walk_remote_log_segments(tp, unsigned_only=True))
        found = [m for m in unsigned if not await self._ops.owns(m)]
        if not found and applied is not None:
            self._no_foreign[tp] = applied
        return found

    async def _owned(
        self, tp: TopicIdPartition, segments: Iterable[RemoteLogSegmentMetadata], why: str
    ) -> list[RemoteLogSegmentMetadata]:
        """``segments`` that rlmm wrote; each other one is logged once and left alone."""
        ours = []
        for m in segments:
            if await self._ops.owns(m):
                ours.append(m)
            elif m.remote_log_segment_id not in self._warned_foreign:
                self._warned_foreign.add(m.remote_log_segment_id)
                log.warning(
                    "%s: not %s %s (%s, broker %d): rlmm did not write it",
                    tp, why, m.remote_log_segment_id, m.state.name, m.broker_id,
                )  # fmt: skip
        return ours

    async def _cleanup(self, tp: TopicIdPartition) -> int:
        """Delete what earlier attempts of rlmm left STARTED (copies and deletions) for ``tp``."""
        leftovers = await self._owned(
            tp,
            [
                m
                for m in self.manager.walk_remote_log_segments(tp, _STARTED_STATES)
                if m.remote_log_segment_id not in self._ops.in_flight and self._left_over(m)
            ],
            "cleaning up",
        )
        for m in leftovers:
            log.info(
                "deleting %s left in %s by an earlier attempt",
                m.remote_log_segment_id,
                m.state.name,
            )
            await self._ops.delete(m)
        return len(leftovers)

    def _left_over(self, m: RemoteLogSegmentMetadata) -> bool:
        """True when ``m`` (STARTED) is a leftover: this broker's (no attempt of its own is
        in flight, so an earlier one crashed), or another broker's older than the grace."""
        if m.broker_id == self._ops.broker_id:
            return True
        return self._clock_ms() - m.event_timestamp_ms >= self._leftover_grace_ms

    def _continue_after(self, tp: TopicIdPartition, copied: int, view: LogView) -> int:
        """``copied``, or the end of the archive's first hole below it when the local log
        still holds the hole's start (so copying goes back and fills it)."""
        end = self.manager.contiguous_end_offset(tp, _FINISHED_STATE)
        if end is None:
            return copied
        local_start = view.local_start_offset
        if end < copied and end + 1 >= max(local_start, view.log_start_offset):
            log.warning(
                "%s: offsets %d.. are missing from remote storage below its highest offset %d"
                " (a finished copy was deleted): copying them again from the local log",
                tp, end + 1, copied,
            )  # fmt: skip
            return end
        return copied

    def _note_missed(
        self, tp: TopicIdPartition, leader: _Leader, copied: int, view: LogView
    ) -> int:
        """Report the offsets between the archive's end and the local log's first segment:
        the broker deleted them (local retention, DeleteRecords) before they were copied,
        as it knows nothing of the sidecar. They are lost to the archive; nothing copied
        yet means the log was cut before rlmm came, not a miss. Returns their count.

        An archive that remote retention emptied is known only to the process that saw
        it hold something: a gap that a restarted sidecar finds first, after that, goes
        unreported."""
        leader.archived_through = max(leader.archived_through, copied)
        if leader.archived_through < 0 or not view.rolled:
            return 0
        first = max(leader.archived_through, leader.accounted_through) + 1
        last = view.rolled[0].base_offset - 1
        if last < first:
            return 0
        leader.accounted_through = last
        self.metrics.offsets_missed.labels(tp.topic).inc(last - first + 1)
        self._ops.emit(OffloadEvent("missed", None, offsets=last - first + 1))
        log.error(
            "%s: offsets %d..%d were deleted from the local log before they were copied"
            " (local retention outran the copy lag, or DeleteRecords): the archive misses"
            " them, unless they were already past retention.ms",
            tp, first, last,
        )  # fmt: skip
        return last - first + 1

    async def _run(self, tp: TopicIdPartition) -> None:
        while True:
            for round_ in (self.copy_round, self.expire_round):
                try:
                    await round_(tp)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the task never dies: the next round retries
                    log.warning("%s of %s failed: %s", round_.__name__, tp, e)
            await asyncio.sleep(self._task_interval_s)

    # ---- offsets ------------------------------------------------------------------------------

    def _archive_end(
        self, tp: TopicIdPartition, epochs: Sequence[EpochStart], log_end_offset: int
    ) -> tuple[int, int | None]:
        """The highest offset in remote storage along the lineage (-1: none), and the
        leader epoch it was found in (Kafka's rule, with KAFKA-15241)."""
        ends = epoch_end_offsets(epochs, log_end_offset)
        for entry in reversed(epochs):
            offset = self.manager.highest_offset_for_epoch(tp, entry.epoch)
            if offset is not None:
                return min(offset, ends[entry.epoch] - 1), entry.epoch
        return -1, None

    def _highest_remote(
        self, tp: TopicIdPartition, epochs: Sequence[EpochStart], log_end_offset: int
    ) -> int:
        return self._archive_end(tp, epochs, log_end_offset)[0]

    def _newest_archived_timestamp(
        self, tp: TopicIdPartition, epoch: int | None, end: int
    ) -> int | None:
        """The max timestamp of the FINISHED segment holding the archive's end ``end``
        (found in ``epoch``); None when no FINISHED segment is left (retention emptied
        the archive: ``highest_offset_for_epoch`` keeps what was copied, as Kafka's)."""
        if epoch is None:
            return None
        segment = self.manager.remote_log_segment_metadata(tp, epoch, end)
        if segment is not None:
            return segment.max_timestamp_ms
        # Rare (a lineage cut inside the epoch): the newest FINISHED segment below it.
        newest = None
        for s in self.manager.walk_segment_summaries(tp, _FINISHED_STATE):
            if s.start_offset <= end and (newest is None or s.start_offset >= newest[0]):
                newest = (s.start_offset, s.max_timestamp_ms)
        return None if newest is None else newest[1]

    def _record_unarchived(self, tp: TopicIdPartition, view: LogView) -> None:
        """Export what of ``tp``'s local log the archive lacks: the offsets from the
        archive's end (or the log start) to the log end and the bytes of the local
        segments holding them, the active segment included (Kafka never copies it, and
        RemoteCopyLag leaves it out), and when the newest archived record was written."""
        end, epoch = self._archive_end(tp, view.epochs, view.log_end_offset)
        start = max(end + 1, view.log_start_offset)
        offsets = max(0, view.log_end_offset - start)
        nbytes = view.local_bytes_from(start) if offsets else 0
        newest = self._newest_archived_timestamp(tp, epoch, end)
        self.metrics.set_unarchived(tp, offsets, nbytes, newest)

    def highest_remote_offset(self, tp: TopicIdPartition) -> int:
        """The highest offset in remote storage along the leader's epoch lineage (-1: none).

        A broker may delete local segments that end at or below it (local retention).
        """
        leader = self._leaders.get(tp)
        if leader is None:
            raise RemoteResourceNotFoundError(f"{tp} is not led by this RemoteLogManager")
        source = leader.source
        return self._highest_remote(tp, source.leader_epochs(), source.log_end_offset())

    # ---- rounds ------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Finish the segments being copied, start no new ones (a graceful shutdown)."""
        self._stopping = True

    def _leader(self, tp: TopicIdPartition) -> _Leader:
        self._check_open()
        leader = self._leaders.get(tp)
        if leader is None:
            raise RemoteResourceNotFoundError(f"{tp} is not led by this RemoteLogManager")
        return leader

    async def copy_round(self, tp: TopicIdPartition) -> CopyResult:
        """Copy every eligible segment of ``tp`` in offset order (one round)."""
        leader = self._leader(tp)
        result = CopyResult()
        async with leader.lock:
            if not self.manager.is_ready(tp):
                return result  # Kafka skips the run while the RLMM catches up
            if leader.source.retention().remote_log_copy_disable:
                self.metrics.set_copy_lag(tp, 0, 0)
                return result  # KIP-950: nothing copied; expiration still runs
            self.metrics.partition_rounds.labels("copy").inc()
            view = await run_blocking(self._file_slots, leader.source.view)
            copied = self._highest_remote(tp, view.epochs, view.log_end_offset)
            copied = self._continue_after(tp, copied, view)
            result.offsets_missed = self._note_missed(tp, leader, copied, view)
            start = max(copied + 1, view.log_start_offset)
            candidates = list(view.rolled_from(start))
            held = await self._hold_back(leader, view, candidates)
            if held.held:
                candidates = candidates[: held.copyable]
                result.held_back, result.held_until_ms = held.held, held.due_ms
            lag_bytes = sum(s.size_in_bytes for s in candidates)
            self.metrics.set_copy_lag(tp, lag_bytes, len(candidates))
            self._record_unarchived(tp, view)
            retention_ms = leader.source.retention().retention_ms
            # Oldest first, the segments already past retention.ms are not uploaded: the
            # expiration that follows would delete them at once. Only a leading run, as
            # Kafka's expiration stops at the first segment it keeps.
            cutoff = self._clock_ms() - retention_ms if retention_ms >= 0 else None
            for i, segment in enumerate(candidates):
                if self._stopping or leader.revoked:
                    result.pending = len(candidates) - i
                    result.abandoned = leader.revoked
                    break
                try:
                    finished = await self._copy_with_retries(leader.source, segment, cutoff)
                except SegmentCopyError as e:
                    result.error = e
                    result.pending = len(candidates) - i
                    log.error("%s: %s", tp, e)
                    self._ops.emit(OffloadEvent("failed", None, segment.size_in_bytes, str(e)))
                    break
                lag_bytes -= segment.size_in_bytes
                if finished is None:
                    leader.accounted_through = segment.next_base_offset - 1
                    result.skipped_expired += 1
                    self._ops.emit(OffloadEvent("skipped", None, segment.size_in_bytes))
                    self.metrics.set_copy_lag(tp, lag_bytes, len(candidates) - i - 1)
                    continue
                cutoff = None  # a segment was kept: the rest are copied
                result.copied.append(finished)
                leader.archived_through = max(leader.archived_through, finished.end_offset)
                result.bytes += finished.segment_size_in_bytes
                self.metrics.set_copy_lag(tp, lag_bytes, len(candidates) - i - 1)
            self._record_remote_size(tp)
            if result.copied:
                self._record_unarchived(tp, view)
        return result

    async def _hold_back(
        self, leader: _Leader, view: LogView, candidates: Sequence[LocalSegment]
    ) -> HeldBack:
        """What the topic's copy delay (KIP-1241) leaves of ``candidates``."""
        delay = CopyDelay.of(leader.source.retention())
        if delay.immediate or not candidates:
            return HeldBack(len(candidates))
        from_first = view.local_bytes_from(candidates[0].base_offset)

        def largest_timestamp(segment: LocalSegment) -> int | None:
            key = (segment.base_offset, segment.size_in_bytes)
            if leader.held is not None and leader.held[:2] == key:
                return leader.held[2]
            try:
                found = leader.source.largest_timestamp(segment)
            except Exception as e:  # the copy reads the segment whole and says why
                log.debug("%s: largest timestamp of %s: %r", leader.source, segment.name, e)
                found = None
            leader.held = (*key, found)
            return found

        now_ms = self._clock_ms()
        held = await run_blocking(
            self._file_slots, hold_back, candidates, from_first, delay, largest_timestamp, now_ms
        )
        if held.held:
            first = candidates[held.copyable]
            log.debug(
                "%s: %d segments held back from %s (offsets %d..) by remote.copy.lag.ms = %d,"
                " remote.copy.lag.bytes = %d (as resolved)",
                leader.source.topic_id_partition, held.held, first.name, first.base_offset,
                delay.lag_ms, delay.lag_bytes,
            )  # fmt: skip
        return held

    async def _copy_with_retries(
        self, source: LogSource, segment: LocalSegment, expired_before_ms: int | None = None
    ) -> RemoteLogSegmentMetadata | None:
        """The finished copy; None, uploading nothing, when the segment's max timestamp
        is at or before ``expired_before_ms`` (retention would delete it)."""
        tp = source.topic_id_partition
        backoff = self._retry_backoff_s
        for attempt in range(1, self._copy_attempts + 1):
            async with self._copy_slots:
                try:
                    desc = await run_blocking(self._file_slots, source.describe, segment)
                except SegmentCopyError:
                    self.metrics.copy_errors.labels(tp.topic).inc()
                    raise
                if expired_before_ms is not None and desc.max_timestamp_ms <= expired_before_ms:
                    log.info(
                        "%s: not copying %s (offsets %d..%d): past retention.ms already"
                        " (max timestamp %d)",
                        tp, segment.name, segment.base_offset, segment.next_base_offset - 1,
                        desc.max_timestamp_ms,
                    )  # fmt: skip
                    return None
                # As Kafka's copier thread does, a throttled copy waits holding its slot.
                await self.copy_quota.reserve(
                    segment.size_in_bytes, self.metrics.record_copy_throttle
                )
                try:
                    return await self._ops.copy(tp, desc)
                except SegmentCopyError as e:
                    if not e.retriable or attempt == self._copy_attempts:
                        raise
                    log.warning("%s (attempt %d, retrying with a new id)", e, attempt)
            await asyncio.sleep(backoff)
            backoff *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def expire_round(self, tp: TopicIdPartition) -> ExpireResult:
        """Delete what remote retention says for ``tp``; finish leftover deletions."""
        leader = self._leader(tp)
        result = ExpireResult()
        async with leader.lock:
            if not self.manager.is_ready(tp):
                return result
            self.metrics.partition_rounds.labels("expire").inc()
            # Leftovers of failed cleanups (the RSM delete failed too) go first; no copy
            # of this partition runs now (we hold its lock), so none of them is live.
            result.cleaned = await self._cleanup(tp)
            view = await run_blocking(self._file_slots, leader.source.view)
            # No await from here to the victims' list: the walks follow the cache as it is.
            copied = self._highest_remote(tp, view.epochs, view.log_end_offset)
            local_only = view.local_bytes_from(copied + 1)
            planned = plan_expiry(
                lambda: self.manager.walk_segment_summaries(tp),
                referenced=_served,
                retention=leader.source.retention(),
                log_start_offset=view.log_start_offset,
                local_only_bytes=local_only,
                now_ms=self._clock_ms(),
            )
            victims = [Victim(c.metadata(), reason) for c, reason in planned]
            chosen = {c.row for c, _ in planned}
            finished = self.manager.walk_segment_summaries(tp, _FINISHED_STATE)
            victims += self._off_lineage(tp, finished, view, chosen, result)
            owned = {
                m.remote_log_segment_id
                for m in await self._owned(tp, (v.segment for v in victims), "expiring")
            }
            victims = [v for v in victims if v.segment.remote_log_segment_id in owned]
            lag = sum(v.segment.segment_size_in_bytes for v in victims)
            self.metrics.set_delete_lag(tp, lag, len(victims))
            for i, victim in enumerate(victims):
                await self._ops.delete(victim.segment)
                result.deleted.append(victim)
                lag -= victim.segment.segment_size_in_bytes
                self.metrics.set_delete_lag(tp, lag, len(victims) - i - 1)
            self._record_remote_size(tp)
            self._record_unarchived(tp, view)
        return result

    def _off_lineage(
        self,
        tp: TopicIdPartition,
        segments: Iterable[SegmentSummary],
        view: LogView,
        chosen: set[int],
        result: ExpireResult,
    ) -> list[Victim]:
        """FINISHED segments (``segments``, but the rows ``chosen`` already) holding
        records the leader's lineage does not have (an unclean election cut them). One is
        deleted only when the local log still starts at or before it, so the next copy
        round uploads again what it served on the lineage; otherwise it stays (readers
        follow the lineage and skip its cut part)."""
        local_start = view.local_start_offset
        lineage = Lineage(view.epochs, view.log_end_offset)
        out = []
        for summary in segments:
            if summary.row in chosen or summary.state != S.COPY_SEGMENT_FINISHED:
                continue
            if not lineage.cuts(summary):
                continue
            m = summary.metadata()
            if local_start <= m.start_offset:
                log.warning(
                    "%s: deleting %s (offsets %d-%d, epochs %s): records off the leader's"
                    " epoch lineage (an unclean leader election truncated them)",
                    tp, m.remote_log_segment_id, m.start_offset, m.end_offset,
                    dict(m.segment_leader_epochs),
                )  # fmt: skip
                out.append(Victim(m, "off-lineage"))
            else:
                result.kept_off_lineage += 1
        return out

    def _record_remote_size(self, tp: TopicIdPartition) -> None:
        count = self.manager.remote_log_segment_count(tp)
        self.metrics.set_remote_log(tp, self.manager.remote_log_size(tp), count)

    async def _one_round(
        self, tp: TopicIdPartition, inputs: Hashable | None = None
    ) -> tuple[CopyResult, ExpireResult]:
        copied = await self.copy_round(tp)
        if self._stopping or copied.abandoned:
            return copied, ExpireResult()
        expired = await self.expire_round(tp)
        self._note_idle(tp, inputs, copied, expired)
        return copied, expired

    def _inputs(self, tps: Sequence[TopicIdPartition]) -> dict[TopicIdPartition, Hashable]:
        """What each partition's round reads, as one value (worker thread: it stats files);
        a partition without a change token is left out."""
        out: dict[TopicIdPartition, Hashable] = {}
        for tp in tps:
            leader = self._leaders.get(tp)
            token = None if leader is None else leader.source.change_token()
            if leader is not None and token is not None:
                out[tp] = (token, leader.source.retention())
        return out

    def _note_idle(
        self,
        tp: TopicIdPartition,
        inputs: Hashable | None,
        copied: CopyResult,
        expired: ExpireResult,
    ) -> None:
        """Remember that ``tp``'s round did nothing with ``inputs`` (taken before it ran),
        and until when the same inputs keep it so: the first retention.ms deadline of its
        segments, or the time the copy delay lets a held segment go. A segment in any
        state but FINISHED (a copy or delete in flight or left over) always gets a
        round."""
        leader = self._leaders.get(tp)
        if leader is None:
            return
        leader.idle = None
        busy = copied.copied or copied.pending or copied.error or copied.skipped_expired
        if inputs is None or busy or copied.round_failure or expired.deleted or expired.cleaned:
            return
        if self.manager.remote_log_segment_count(tp, _UNFINISHED_STATES):
            return
        retention_ms = leader.source.retention().retention_ms
        oldest = self.manager.oldest_max_timestamp_ms(tp) if retention_ms >= 0 else None
        until = 2**63 if oldest is None else min(2**63, oldest + retention_ms)
        if copied.held_until_ms is not None:  # the copy delay lets a segment go then
            until = min(until, copied.held_until_ms)
        leader.idle = (inputs, until)

    def _still_idle(self, tp: TopicIdPartition, inputs: Hashable | None, now_ms: int) -> bool:
        leader = self._leaders.get(tp)
        if leader is None or leader.idle is None or inputs is None:
            return False
        return leader.idle[0] == inputs and now_ms < leader.idle[1]

    async def run_round(
        self, tps: Iterable[TopicIdPartition] | None = None
    ) -> dict[TopicIdPartition, tuple[CopyResult, ExpireResult]]:
        """A copy then an expiration round of every (given) leader partition, concurrently.

        A partition ``abandon``-ed meanwhile reports ``abandoned`` (not an error)."""
        chosen = list(self._leaders) if tps is None else list(tps)
        self.metrics.rounds.inc()
        led = {tp for tp in chosen if tp in self._leaders}
        inputs = await run_blocking(self._file_slots, self._inputs, chosen)
        now_ms = self._clock_ms()
        idle, tasks, gone = [], {}, []
        for tp in chosen:
            if tp in led and tp not in self._leaders:
                gone.append(tp)  # abandoned while the inputs were read
                continue
            token = inputs.get(tp)
            # the metadata part is read here, on the loop, where the manager's state lives
            applied = self.manager.applied_offset_of(tp) if token is not None else None
            ready = applied is not None and self.manager.is_ready(tp)
            token = (token, applied) if ready else None
            if self._still_idle(tp, token, now_ms):
                idle.append(tp)
            else:
                tasks[tp] = asyncio.create_task(self._one_round(tp, token), name=f"round-{tp}")
        if idle:  # counted as the runs they stand for
            copying = [tp for tp in idle if not self._leaders[tp].source.retention()
                       .remote_log_copy_disable]  # fmt: skip
            self.metrics.partition_rounds.labels("copy").inc(len(copying))
            self.metrics.partition_rounds.labels("expire").inc(len(idle))
        self._rounds.update(tasks)
        try:
            results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        finally:
            for tp, task in tasks.items():
                if self._rounds.get(tp) is task:
                    del self._rounds[tp]
        # One empty result stands for every skipped partition (thousands each round on
        # a broker); callers read results, never change them.
        nothing = (CopyResult(), ExpireResult())
        out: dict[TopicIdPartition, tuple[CopyResult, ExpireResult]] = dict.fromkeys(idle, nothing)
        out.update({tp: (CopyResult(abandoned=True), ExpireResult()) for tp in gone})
        for tp, r in zip(tasks, results, strict=True):
            if isinstance(r, asyncio.CancelledError) and tp not in self._leaders:
                out[tp] = (CopyResult(abandoned=True), ExpireResult())
            elif isinstance(r, BaseException):
                if not isinstance(r, Exception):
                    raise r
                log.error("round of %s failed: %s", tp, r)
                failed = CopyResult(round_failure=r)
                failed.error = SegmentCopyError(f"round of {tp} failed: {r}")
                out[tp] = (failed, ExpireResult())
            else:
                out[tp] = r
        return out

    # ---- reads ---------------------------------------------------------------------------------

    async def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes:
        """Bytes ``start_position..end_position`` (inclusive) of a remote segment, counted in
        the fetch metrics (Kafka's RemoteFetch*); the RSM call runs in a worker thread."""
        self._check_open()
        topic = metadata.topic_id_partition.topic
        self.metrics.fetch_requests.labels(topic).inc()
        try:
            data = await run_blocking(
                self._ops.io_slots, _read_range, self.rsm, metadata, start_position, end_position
            )
        except BaseException:
            self.metrics.fetch_errors.labels(topic).inc()
            raise
        self.metrics.fetch_bytes.labels(topic).inc(len(data))
        return data

    # ---- partition deletion ------------------------------------------------------------------

    async def delete_partition(self, tp: TopicIdPartition, *, only_if_tiered: bool = False) -> int:
        """Delete every remote segment of ``tp``, then mark the partition deleted (returns count).

        Goes DELETE_PARTITION_MARKED -> STARTED -> (segments) -> FINISHED; a rerun after
        a crash resumes where the states say. ``only_if_tiered``: a partition with no
        remote segment and no deletion begun gets no event at all.
        """
        self._check_open()
        leader = self._leaders.get(tp)
        if leader is not None:
            await self._stop_task(leader)
        if tp not in self.manager.assigned_partitions:
            await self.manager.on_partition_leadership_changes([], [tp])
        await self.manager.wait_until_ready([tp], self._ready_timeout_s)
        state = self.manager.remote_partition_delete_state(tp)
        current = None if state is None else state.state
        if current == P.DELETE_PARTITION_FINISHED:
            return 0
        if only_if_tiered and current is None and not self.manager.remote_log_segment_count(tp):
            return 0
        foreign = await self.foreign_segments(tp)
        if foreign:
            # Another writer (Kafka's own tiering) owns segments here: its partition
            # deletion is its own, and rlmm writes no event for it.
            raise ForeignSegmentError(
                f"not deleting {tp}: {len(foreign)} of its remote segments were not written"
                f" by rlmm (e.g. {foreign[0].remote_log_segment_id}, broker"
                f" {foreign[0].broker_id})"
            )
        for target in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
            if current is None or current < target:
                await self.manager.put_remote_partition_delete_metadata(
                    RemotePartitionDeleteMetadata(tp, target, self._clock_ms(), self._ops.broker_id)
                )
        deleted = 0
        for m in self.manager.list_remote_log_segments(tp):
            await self._ops.delete(m)
            deleted += 1
        await self.manager.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(
                tp, P.DELETE_PARTITION_FINISHED, self._clock_ms(), self._ops.broker_id
            )
        )
        self._leaders.pop(tp, None)
        self.metrics.clear_unarchived(tp)
        return deleted

    # ---- lifecycle ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise OffloadError("the RemoteLogManager is closed")

    async def close(self) -> None:
        """Stop every task (in-flight copies clean up after themselves). Idempotent.

        The RLMM and the RSM belong to the caller and stay open.
        """
        if self._closed:
            return
        self._closed = True
        for leader in self._leaders.values():
            await self._stop_task(leader)

    async def __aenter__(self) -> RemoteLogManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["CopyResult", "ExpireResult", "RemoteLogManager"]
