"""ExpirationRound: one expiration round of one led partition (Kafka's expiration task).

Invariants: leftovers of failed cleanups go first, under the partition's lock (no copy
of it runs then, so none of them is live); only segments rlmm wrote are deleted
(``Leftovers.owned``); retention (``plan_expiry``) chooses from the metadata as one
walk sees it, with no await between the walk and the victims' list; a FINISHED segment
off the leader's epoch lineage (an unclean election cut it) is deleted only once the
local log still holds what it served on the lineage; the delete lag is exported before
the first deletion and after each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from rlmm.cache import SegmentSummary
from rlmm.model import RemoteLogSegmentState, TopicIdPartition
from rlmm.offload.archive import FINISHED_STATE, Archive
from rlmm.offload.blocking import run_blocking
from rlmm.offload.expiry import Lineage, Victim, plan_expiry
from rlmm.offload.led_partition import LedPartition
from rlmm.offload.leftovers import Leftovers
from rlmm.offload.log_source import LogView
from rlmm.offload.segment_ops import SegmentOps

# The RemoteLogManager's lines keep the logger name operators filter on, whichever
# module says them.
log = logging.getLogger("rlmm.offload.remote_log_manager")

S = RemoteLogSegmentState


@dataclass
class ExpireResult:
    """What one expiration round of one partition did."""

    deleted: list[Victim] = field(default_factory=list)
    cleaned: int = 0  # DELETE_SEGMENT_STARTED leftovers finished
    kept_off_lineage: int = 0  # off the lineage, but the local log no longer holds their start


def _served(summary: SegmentSummary) -> bool:
    """A lookup of some offset of the segment still finds it (expiry's ``referenced``)."""
    return summary.referenced


class ExpirationRound:
    """Deletes what remote retention says of a led partition, shared by all partitions."""

    def __init__(
        self,
        ops: SegmentOps,
        archive: Archive,
        leftovers: Leftovers,
        file_slots: asyncio.Semaphore,
    ) -> None:
        self._ops = ops
        self._archive = archive
        self._leftovers = leftovers
        self._file_slots = file_slots

    async def run(self, leader: LedPartition) -> ExpireResult:
        """Delete what remote retention says for the partition; finish leftover deletions."""
        tp = leader.source.topic_id_partition
        manager, metrics = self._ops.manager, self._ops.metrics
        result = ExpireResult()
        async with leader.lock:
            if not manager.is_ready(tp):
                return result
            metrics.partition_rounds.labels("expire").inc()
            # Leftovers of failed cleanups (the RSM delete failed too) go first; no copy
            # of this partition runs now (we hold its lock), so none of them is live.
            result.cleaned = await self._leftovers.clean(tp)
            view = await run_blocking(self._file_slots, leader.source.view)
            # No await from here to the victims' list: the walks follow the cache as it is.
            copied = self._archive.highest(tp, view.epochs, view.log_end_offset)
            local_only = view.local_bytes_from(copied + 1)
            planned = plan_expiry(
                lambda: manager.walk_segment_summaries(tp),
                referenced=_served,
                retention=leader.source.retention(),
                log_start_offset=view.log_start_offset,
                local_only_bytes=local_only,
                now_ms=self._ops.clock_ms(),
            )
            victims = [Victim(c.metadata(), reason) for c, reason in planned]
            chosen = {c.row for c, _ in planned}
            finished = manager.walk_segment_summaries(tp, FINISHED_STATE)
            victims += self._off_lineage(tp, finished, view, chosen, result)
            owned = {
                m.remote_log_segment_id
                for m in await self._leftovers.owned(tp, (v.segment for v in victims), "expiring")
            }
            victims = [v for v in victims if v.segment.remote_log_segment_id in owned]
            lag = sum(v.segment.segment_size_in_bytes for v in victims)
            metrics.set_delete_lag(tp, lag, len(victims))
            for i, victim in enumerate(victims):
                await self._ops.delete(victim.segment)
                result.deleted.append(victim)
                lag -= victim.segment.segment_size_in_bytes
                metrics.set_delete_lag(tp, lag, len(victims) - i - 1)
            self._archive.record_size(tp)
            self._archive.record_unarchived(tp, view)
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


__all__ = ["ExpirationRound", "ExpireResult"]
