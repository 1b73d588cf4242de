"""Leftovers: what earlier attempts left STARTED, and which segments rlmm may touch.

Invariants: only segments rlmm wrote are ever cleaned up or deleted (``SegmentOps.owns``);
another writer's (Kafka's own RemoteLogManager) is logged once, however many rounds
meet it, and left alone. A STARTED segment (a copy or a deletion) is a leftover when it
is this broker's and no attempt of its own is in flight for it (an earlier one
crashed), or another broker's older than ``grace_ms``: the old leader may still be
finishing it, and a FINISHED that lands before our DELETE_SEGMENT_STARTED would make
that delete remove a finished copy. While a partition's metadata is unchanged since a
check found no foreign segment, there is none (a segment rlmm wrote stays rlmm's; a
new segment is a new event).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from rlmm.offload.segment_ops import SegmentOps

# The RemoteLogManager's lines keep the logger name operators filter on, whichever
# module says them.
log = logging.getLogger("rlmm.offload.remote_log_manager")

S = RemoteLogSegmentState
STARTED_STATES = frozenset({S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED})


class Leftovers:
    """Crash cleanup and the ownership checks of one RemoteLogManager's partitions."""

    def __init__(self, ops: SegmentOps, grace_ms: int) -> None:
        self._ops = ops
        self._grace_ms = grace_ms
        self._warned_foreign: set[object] = set()
        # partition -> its metadata's applied offset when no foreign segment was found
        self.no_foreign: dict[TopicIdPartition, int] = {}

    async def foreign(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The segments of ``tp`` in the metadata that rlmm did not write."""
        # The sidecar asks this of every partition each round: while the metadata is
        # unchanged since a check found none, there is none.
        manager = self._ops.manager
        applied = manager.applied_offset_of(tp)
        if applied is not None and self.no_foreign.get(tp) == applied:
            return []
        # A signed id is rlmm's without a look at the store; only the others are asked.
        unsigned = list(manager.walk_remote_log_segments(tp, unsigned_only=True))
        found = [m for m in unsigned if not await self._ops.owns(m)]
        if not found and applied is not None:
            self.no_foreign[tp] = applied
        return found

    async def owned(
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

    async def clean(self, tp: TopicIdPartition) -> int:
        """Delete what earlier attempts of rlmm left STARTED (copies and deletions) for ``tp``."""
        leftovers = await self.owned(
            tp,
            [
                m
                for m in self._ops.manager.walk_remote_log_segments(tp, STARTED_STATES)
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
        return self._ops.clock_ms() - m.event_timestamp_ms >= self._grace_ms


__all__ = ["STARTED_STATES", "Leftovers"]
