"""Partition deletion: every remote segment of a partition, then the partition itself.

Invariant: the states go DELETE_PARTITION_MARKED -> STARTED -> (each segment deleted)
-> FINISHED, each written once, so a rerun after a crash resumes where the states say;
a partition holding a segment another writer (Kafka's own tiering) wrote is refused
before any event is written (its deletion is that writer's); with ``only_if_tiered``,
a partition with no remote segment and no deletion begun gets no event at all.
"""

from __future__ import annotations

from rlmm.model import RemotePartitionDeleteMetadata, RemotePartitionDeleteState, TopicIdPartition
from rlmm.offload.errors import ForeignSegmentError
from rlmm.offload.leftovers import Leftovers
from rlmm.offload.segment_ops import SegmentOps

P = RemotePartitionDeleteState


async def delete_remote_partition(
    ops: SegmentOps,
    leftovers: Leftovers,
    tp: TopicIdPartition,
    *,
    only_if_tiered: bool,
    ready_timeout_s: float,
) -> int | None:
    """Delete every remote segment of ``tp``, then mark the partition deleted; the count
    deleted, or None when there was nothing to do (deleted already, or not tiered)."""
    manager = ops.manager
    if tp not in manager.assigned_partitions:
        await manager.on_partition_leadership_changes([], [tp])
    await manager.wait_until_ready([tp], ready_timeout_s)
    state = manager.remote_partition_delete_state(tp)
    current = None if state is None else state.state
    if current == P.DELETE_PARTITION_FINISHED:
        return None
    if only_if_tiered and current is None and not manager.remote_log_segment_count(tp):
        return None
    foreign = await leftovers.foreign(tp)
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
            await manager.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(tp, target, ops.clock_ms(), ops.broker_id)
            )
    deleted = 0
    for m in manager.list_remote_log_segments(tp):
        await ops.delete(m)
        deleted += 1
    await manager.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(
            tp, P.DELETE_PARTITION_FINISHED, ops.clock_ms(), ops.broker_id
        )
    )
    return deleted


__all__ = ["delete_remote_partition"]
