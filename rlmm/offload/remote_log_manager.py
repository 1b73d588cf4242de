"""RemoteLogManager: the broker side of tiered storage (Kafka's RemoteLogManager).

One per broker. It owns the RLMM assignment and, per leader partition, a task that
runs a copy round then an expiration round every ``task_interval_s``; followers get
metadata only. ``copy_round`` / ``expire_round`` run one round directly. The rounds
are ``CopyRound`` and ``ExpirationRound``, the crash cleanup ``Leftovers``, the
archive's end and tail ``Archive``, the skipping of idle rounds ``idle_rounds``.

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
from collections.abc import Callable, Hashable, Iterable
from collections.abc import Set as AbstractSet

from remote import RemoteStorageManager
from rlmm.errors import RemoteResourceNotFoundError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition
from rlmm.offload.archive import Archive
from rlmm.offload.blocking import run_blocking
from rlmm.offload.copy_round import CopyResult, CopyRound
from rlmm.offload.errors import OffloadError, SegmentCopyError
from rlmm.offload.expiration_round import ExpirationRound, ExpireResult
from rlmm.offload.faults import KillPoints
from rlmm.offload.idle_rounds import note_idle, round_inputs, still_idle
from rlmm.offload.led_partition import LedPartition
from rlmm.offload.leftovers import Leftovers
from rlmm.offload.log_source import LogSource
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.ownership import Ownership
from rlmm.offload.partition_deletion import delete_remote_partition
from rlmm.offload.quota import CopyQuota
from rlmm.offload.remote_reads import read_range
from rlmm.offload.segment_ops import OffloadEvent, SegmentOps
from rlmm.offload_metadata import OffloadMetadataManager

log = logging.getLogger(__name__)

Outcome = tuple[CopyResult, ExpireResult]


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
        self.metrics.watch_store(rsm.paused_seconds)
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
        self.copy_quota = copy_quota if copy_quota is not None else CopyQuota()
        self._file_slots = asyncio.Semaphore(copier_concurrency + 2)
        self._task_interval_s = task_interval_s
        # Long enough for an old leader to learn it lost leadership and abandon its copy.
        leftover_grace_ms = int(
            1000 * (leftover_grace_s if leftover_grace_s is not None else 10 * task_interval_s)
        )
        self._ready_timeout_s = ready_timeout_s
        self._archive = Archive(manager, self.metrics)
        self._leftovers = Leftovers(self._ops, leftover_grace_ms)
        copy_slots = asyncio.Semaphore(copier_concurrency)
        self._copier = CopyRound(
            self._ops, self._archive, self._file_slots, copy_slots, self.copy_quota,
            copy_attempts, retry_backoff_s,
        )  # fmt: skip
        self._expirer = ExpirationRound(self._ops, self._archive, self._leftovers, self._file_slots)
        self._leaders: dict[TopicIdPartition, LedPartition] = {}
        self._followers: set[TopicIdPartition] = set()
        self._rounds: dict[TopicIdPartition, asyncio.Task[Outcome]] = {}
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
                leader = self._leaders[tp] = LedPartition(source)
                fresh.append(tp)
                self.metrics.init_topic(tp.topic)
            leader.source = source
        results = await asyncio.gather(
            *(self._leftovers.clean(tp) for tp in fresh), return_exceptions=True
        )
        for tp, result in zip(fresh, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            if isinstance(result, Exception):
                log.warning("crash cleanup of %s failed (retried next round): %s", tp, result)
            elif self.manager.is_ready(tp):
                # From the metadata, now: a first round over a backlog sets it only
                # once its copies are done, and dashboards would show a gap until then.
                self._archive.record_size(tp)
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
            self._leftovers.no_foreign.pop(tp, None)
            self.metrics.clear_unarchived(tp)
        await self.manager.on_stop_partitions(tps)

    async def _stop_task(self, leader: LedPartition) -> None:
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
        return await self._leftovers.foreign(tp)

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

    def highest_remote_offset(self, tp: TopicIdPartition) -> int:
        """The highest offset in remote storage along the leader's epoch lineage (-1: none).

        A broker may delete local segments that end at or below it (local retention).
        """
        leader = self._leaders.get(tp)
        if leader is None:
            raise RemoteResourceNotFoundError(f"{tp} is not led by this RemoteLogManager")
        source = leader.source
        return self._archive.highest(tp, source.leader_epochs(), source.log_end_offset())

    # ---- rounds ------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Finish the segments being copied, start no new ones (a graceful shutdown)."""
        self._copier.stopping = True

    def _leader(self, tp: TopicIdPartition) -> LedPartition:
        self._check_open()
        leader = self._leaders.get(tp)
        if leader is None:
            raise RemoteResourceNotFoundError(f"{tp} is not led by this RemoteLogManager")
        return leader

    async def copy_round(self, tp: TopicIdPartition) -> CopyResult:
        """Copy every eligible segment of ``tp`` in offset order (one round)."""
        return await self._copier.run(self._leader(tp))

    async def expire_round(self, tp: TopicIdPartition) -> ExpireResult:
        """Delete what remote retention says for ``tp``; finish leftover deletions."""
        return await self._expirer.run(self._leader(tp))

    async def _one_round(self, tp: TopicIdPartition, inputs: Hashable | None = None) -> Outcome:
        copied = await self.copy_round(tp)
        if self._copier.stopping or copied.abandoned:
            return copied, ExpireResult()
        expired = await self.expire_round(tp)
        leader = self._leaders.get(tp)
        if leader is not None:
            note_idle(self.manager, leader, inputs, copied, expired)
        return copied, expired

    async def run_round(
        self, tps: Iterable[TopicIdPartition] | None = None
    ) -> dict[TopicIdPartition, Outcome]:
        """A copy then an expiration round of every (given) leader partition, concurrently.

        A partition ``abandon``-ed meanwhile reports ``abandoned`` (not an error)."""
        chosen = list(self._leaders) if tps is None else list(tps)
        self.metrics.rounds.inc()
        led = {tp for tp in chosen if tp in self._leaders}
        inputs = await run_blocking(self._file_slots, round_inputs, self._leaders, chosen)
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
            if still_idle(self._leaders.get(tp), token, now_ms):
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
        out: dict[TopicIdPartition, Outcome] = dict.fromkeys(idle, nothing)
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
        return await read_range(
            self.rsm, self._ops.io_slots, self.metrics, metadata, start_position, end_position
        )

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
        deleted = await delete_remote_partition(
            self._ops,
            self._leftovers,
            tp,
            only_if_tiered=only_if_tiered,
            ready_timeout_s=self._ready_timeout_s,
        )
        if deleted is None:
            return 0
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
