"""CopyRound: one copy round of one led partition (Kafka's copy task).

Invariants:
- segments are copied in offset order, and one that cannot be copied stops the
  partition's round (copying a later one would leave a hole in the remote lineage);
- at most ``copy_slots`` copies run at once across partitions; a throttled copy waits
  holding its slot (as Kafka's copier thread does), and every file call runs in a
  worker thread bounded by ``file_slots``;
- the copy continues after the archive's end along the lineage, or from a hole below
  it that the local log still holds (``Archive.continue_after``);
- offsets the local log lost before they were copied are reported once per gap (an
  error, a counter), never silently skipped over;
- a segment the topic's copy delay holds back (KIP-1241) is not copied, nor any after
  it, and is not copy lag;
- once ``stopping`` is set or the partition is revoked, no new segment starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition
from rlmm.offload.archive import Archive
from rlmm.offload.blocking import run_blocking
from rlmm.offload.copy_delay import CopyDelay, HeldBack, hold_back
from rlmm.offload.errors import SegmentCopyError
from rlmm.offload.led_partition import LedPartition
from rlmm.offload.log_source import LocalSegment, LogSource, LogView
from rlmm.offload.quota import CopyQuota
from rlmm.offload.segment_ops import OffloadEvent, SegmentOps

# The RemoteLogManager's lines keep the logger name operators filter on, whichever
# module says them.
log = logging.getLogger("rlmm.offload.remote_log_manager")


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


class CopyRound:
    """Copies the eligible segments of a led partition, shared by all partitions."""

    def __init__(
        self,
        ops: SegmentOps,
        archive: Archive,
        file_slots: asyncio.Semaphore,
        copy_slots: asyncio.Semaphore,
        quota: CopyQuota,
        attempts: int,
        retry_backoff_s: float,
    ) -> None:
        self._ops = ops
        self._archive = archive
        self._file_slots = file_slots
        self._copy_slots = copy_slots
        self._quota = quota
        self._attempts = attempts
        self._retry_backoff_s = retry_backoff_s
        self.stopping = False  # a graceful shutdown: finish the copies begun, start none

    async def run(self, leader: LedPartition) -> CopyResult:
        """Copy every eligible segment of ``leader``'s partition in offset order."""
        tp = leader.source.topic_id_partition
        manager, metrics = self._ops.manager, self._ops.metrics
        result = CopyResult()
        async with leader.lock:
            if not manager.is_ready(tp):
                return result  # Kafka skips the run while the RLMM catches up
            if leader.source.retention().remote_log_copy_disable:
                metrics.set_copy_lag(tp, 0, 0)
                return result  # KIP-950: nothing copied; expiration still runs
            metrics.partition_rounds.labels("copy").inc()
            view = await run_blocking(self._file_slots, leader.source.view)
            copied = self._archive.highest(tp, view.epochs, view.log_end_offset)
            copied = self._archive.continue_after(tp, copied, view)
            result.offsets_missed = self._note_missed(tp, leader, copied, view)
            start = max(copied + 1, view.log_start_offset)
            candidates = list(view.rolled_from(start))
            held = await self._hold_back(leader, view, candidates)
            if held.held:
                candidates = candidates[: held.copyable]
                result.held_back, result.held_until_ms = held.held, held.due_ms
            metrics.set_copy_lag(tp, sum(s.size_in_bytes for s in candidates), len(candidates))
            self._archive.record_unarchived(tp, view)
            await self._copy_each(leader, candidates, result)
            self._archive.record_size(tp)
            if result.copied:
                self._archive.record_unarchived(tp, view)
        return result

    async def _copy_each(
        self, leader: LedPartition, candidates: Sequence[LocalSegment], result: CopyResult
    ) -> None:
        """Copy ``candidates`` in order into ``result``, the copy lag set after each."""
        tp = leader.source.topic_id_partition
        lag_bytes = sum(s.size_in_bytes for s in candidates)
        retention_ms = leader.source.retention().retention_ms
        # Oldest first, the segments already past retention.ms are not uploaded: the
        # expiration that follows would delete them at once. Only a leading run, as
        # Kafka's expiration stops at the first segment it keeps.
        cutoff = self._ops.clock_ms() - retention_ms if retention_ms >= 0 else None
        for i, segment in enumerate(candidates):
            if self.stopping or leader.revoked:
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
                self._ops.metrics.set_copy_lag(tp, lag_bytes, len(candidates) - i - 1)
                continue
            cutoff = None  # a segment was kept: the rest are copied
            result.copied.append(finished)
            leader.archived_through = max(leader.archived_through, finished.end_offset)
            result.bytes += finished.segment_size_in_bytes
            self._ops.metrics.set_copy_lag(tp, lag_bytes, len(candidates) - i - 1)

    def _note_missed(
        self, tp: TopicIdPartition, leader: LedPartition, copied: int, view: LogView
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
        self._ops.metrics.offsets_missed.labels(tp.topic).inc(last - first + 1)
        self._ops.emit(OffloadEvent("missed", None, offsets=last - first + 1))
        log.error(
            "%s: offsets %d..%d were deleted from the local log before they were copied"
            " (local retention outran the copy lag, or DeleteRecords): the archive misses"
            " them, unless they were already past retention.ms",
            tp, first, last,
        )  # fmt: skip
        return last - first + 1

    async def _hold_back(
        self, leader: LedPartition, view: LogView, candidates: Sequence[LocalSegment]
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

        now_ms = self._ops.clock_ms()
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
        for attempt in range(1, self._attempts + 1):
            async with self._copy_slots:
                try:
                    desc = await run_blocking(self._file_slots, source.describe, segment)
                except SegmentCopyError:
                    self._ops.metrics.copy_errors.labels(tp.topic).inc()
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
                await self._quota.reserve(
                    segment.size_in_bytes, self._ops.metrics.record_copy_throttle
                )
                try:
                    return await self._ops.copy(tp, desc)
                except SegmentCopyError as e:
                    if not e.retriable or attempt == self._attempts:
                        raise
                    log.warning("%s (attempt %d, retrying with a new id)", e, attempt)
            await asyncio.sleep(backoff)
            backoff *= 2
        raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["CopyResult", "CopyRound"]
