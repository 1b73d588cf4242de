"""Which remote segments retention deletes (Kafka's RLMExpirationTask, as a pure function).

Invariants: only COPY_SEGMENT_FINISHED segments are victims; the walk goes oldest
first and stops at the first segment retention keeps, and at the first segment not
older than one still being copied (as Kafka's does); a FINISHED segment no offset of
which is served any more (superseded by a newer leader's copy) is a victim wherever
it is, since no reader can reach it. ``off_lineage`` says when a segment holds
records the leader's epoch lineage does not (Kafka's isRemoteSegmentWithinLeaderEpochs,
restricted to what a leader can judge: never an epoch newer than its own, never the
start of its earliest epoch, which local retention moves).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rlmm.offload.log_source import EpochStart, RetentionSettings, epoch_end_offsets

S = RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class Victim:
    segment: RemoteLogSegmentMetadata
    reason: str  # "log-start", "retention.ms", "retention.bytes", "superseded", "off-lineage"


def plan_expiry(
    walk: Callable[[], Iterable[RemoteLogSegmentMetadata]],
    *,
    referenced: Callable[[RemoteLogSegmentMetadata], bool],
    retention: RetentionSettings,
    log_start_offset: int,
    local_only_bytes: int,
    now_ms: int,
) -> list[Victim]:
    """The segments to delete, oldest first. ``walk()`` yields the partition's segments
    by start offset, afresh at each call: it is walked twice (the totals, then the
    walk), and no list of them all is made, as a partition may keep thousands."""
    walk_limit = None
    superseded: list[Victim] = []
    remote_bytes = 0
    for m in walk():
        if m.state == S.COPY_SEGMENT_STARTED:
            if walk_limit is None:
                walk_limit = m.start_offset  # the first one is the oldest being copied
        elif m.state == S.COPY_SEGMENT_FINISHED:
            if referenced(m):  # one lookup each: it is the round's cost
                remote_bytes += m.segment_size_in_bytes
            else:
                superseded.append(Victim(m, "superseded"))
    gone = {v.segment.remote_log_segment_id for v in superseded}
    excess = None
    if retention.retention_bytes >= 0:
        excess = local_only_bytes + remote_bytes - retention.retention_bytes
    cutoff = now_ms - retention.retention_ms if retention.retention_ms >= 0 else None
    victims = superseded
    for m in walk():
        if m.state != S.COPY_SEGMENT_FINISHED or m.remote_log_segment_id in gone:
            continue
        if walk_limit is not None and m.start_offset >= walk_limit:
            break
        if m.end_offset < log_start_offset:
            reason = "log-start"
        elif cutoff is not None and m.max_timestamp_ms <= cutoff:
            reason = "retention.ms"
        elif excess is not None and excess >= m.segment_size_in_bytes:
            # Kafka's rule: only a segment that fits wholly in the breach goes.
            reason = "retention.bytes"
        else:
            break
        victims.append(Victim(m, reason))
        if excess is not None:
            excess -= m.segment_size_in_bytes
    return sorted(victims, key=lambda v: v.segment.start_offset)


def off_lineage(
    segment: RemoteLogSegmentMetadata, epochs: Sequence[EpochStart], log_end_offset: int
) -> bool:
    """True when ``segment`` holds records of an epoch the leader's lineage ``epochs``
    (its leader-epoch checkpoint) skips, or records before the lineage starts that epoch
    or after it ends it. Epochs newer than the leader's newest say nothing (the leader's
    view is behind, not the segment), nor does the end of the leader's own newest epoch
    (its log end may be read short while the broker writes)."""
    if not epochs:
        return False
    starts = {e.epoch: e.start_offset for e in epochs}
    ends = epoch_end_offsets(epochs, log_end_offset)
    earliest, latest = epochs[0].epoch, epochs[-1].epoch
    items = sorted(segment.segment_leader_epochs.items())
    if items and items[-1][0] > latest:
        return False
    for i, (epoch, start) in enumerate(items):
        end = items[i + 1][1] - 1 if i + 1 < len(items) else segment.end_offset
        if end < start or epoch < earliest:
            continue  # no records in it, or history local retention already dropped
        if epoch not in starts:
            return True
        if epoch != earliest and start < starts[epoch]:
            return True
        if epoch != latest and end >= ends[epoch]:
            return True
    return False


__all__ = ["Victim", "off_lineage", "plan_expiry"]
