"""Idle rounds: when a partition's next round would do nothing again, and is skipped.

Invariant: a partition counts as idle only while the inputs its round reads (the
source's ``change_token``, its metadata's applied offset, its settings) are those read
before its last round, that round did nothing, no segment of it is in a state but
FINISHED (a copy or delete in flight or left over always gets a round), and neither
the first retention.ms deadline of its segments nor the time the copy delay lets a
held segment go has passed. A round over thousands of idle partitions must not read
them all.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from rlmm.model import RemoteLogSegmentState, TopicIdPartition
from rlmm.offload.copy_round import CopyResult
from rlmm.offload.expiration_round import ExpireResult
from rlmm.offload.led_partition import LedPartition
from rlmm.offload_metadata import OffloadMetadataManager

UNFINISHED_STATES = frozenset(
    set(RemoteLogSegmentState) - {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
)


def round_inputs(
    leaders: Mapping[TopicIdPartition, LedPartition], tps: Sequence[TopicIdPartition]
) -> dict[TopicIdPartition, Hashable]:
    """What each partition's round reads, as one value (worker thread: it stats files);
    a partition without a change token is left out."""
    out: dict[TopicIdPartition, Hashable] = {}
    for tp in tps:
        leader = leaders.get(tp)
        token = None if leader is None else leader.source.change_token()
        if leader is not None and token is not None:
            out[tp] = (token, leader.source.retention())
    return out


def note_idle(
    manager: OffloadMetadataManager,
    leader: LedPartition,
    inputs: Hashable | None,
    copied: CopyResult,
    expired: ExpireResult,
) -> None:
    """Remember that ``leader``'s round did nothing with ``inputs`` (taken before it ran),
    and until when the same inputs keep it so: the first retention.ms deadline of its
    segments, or the time the copy delay lets a held segment go. A segment in any
    state but FINISHED (a copy or delete in flight or left over) always gets a
    round."""
    tp = leader.source.topic_id_partition
    leader.idle = None
    busy = copied.copied or copied.pending or copied.error or copied.skipped_expired
    if inputs is None or busy or copied.round_failure or expired.deleted or expired.cleaned:
        return
    if manager.remote_log_segment_count(tp, UNFINISHED_STATES):
        return
    retention_ms = leader.source.retention().retention_ms
    oldest = manager.oldest_max_timestamp_ms(tp) if retention_ms >= 0 else None
    until = 2**63 if oldest is None else min(2**63, oldest + retention_ms)
    if copied.held_until_ms is not None:  # the copy delay lets a segment go then
        until = min(until, copied.held_until_ms)
    leader.idle = (inputs, until)


def still_idle(leader: LedPartition | None, inputs: Hashable | None, now_ms: int) -> bool:
    """True when ``leader``'s round, with ``inputs`` at ``now_ms``, would do nothing again."""
    if leader is None or leader.idle is None or inputs is None:
        return False
    return leader.idle[0] == inputs and now_ms < leader.idle[1]


__all__ = ["note_idle", "round_inputs", "still_idle"]
