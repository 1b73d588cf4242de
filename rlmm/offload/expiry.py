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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rlmm.offload.log_source import EpochStart, RetentionSettings, epoch_end_offsets

S = RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class Victim:
    segment: RemoteLogSegmentMetadata
    reason: str  # "log-start", "retention.ms", "retention.bytes", "superseded", "off-lineage"


class SegmentFacts(Protocol):
    """What the expiry walk reads of a segment: a RemoteLogSegmentMetadata, or the
    cache's ``SegmentSummary`` of one (no object per kept segment and round)."""

    @property
    def state(self) -> RemoteLogSegmentState: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def max_timestamp_ms(self) -> int: ...
    @property
    def segment_size_in_bytes(self) -> int: ...
    @property
    def segment_leader_epochs(self) -> Mapping[int, int]: ...


_F = TypeVar("_F", bound=SegmentFacts)


def plan_expiry(
    walk: Callable[[], Iterable[_F]],
    *,
    referenced: Callable[[_F], bool],
    retention: RetentionSettings,
    log_start_offset: int,
    local_only_bytes: int,
    now_ms: int,
) -> list[tuple[_F, str]]:
    """The segments to delete, oldest first, each with its reason. ``walk()`` yields the
    partition's segments by start offset, afresh at each call: it is walked twice (the
    totals, then the walk), and no list of them all is made, as a partition may keep
    thousands. ``referenced`` answers the same for a segment in both walks."""
    walk_limit = None
    superseded: list[tuple[_F, str]] = []
    remote_bytes = 0
    for m in walk():
        if m.state == S.COPY_SEGMENT_STARTED:
            if walk_limit is None:
                walk_limit = m.start_offset  # the first one is the oldest being copied
        elif m.state == S.COPY_SEGMENT_FINISHED:
            if referenced(m):  # one lookup each: it is the round's cost
                remote_bytes += m.segment_size_in_bytes
            else:
                superseded.append((m, "superseded"))
    excess = None
    if retention.retention_bytes >= 0:
        excess = local_only_bytes + remote_bytes - retention.retention_bytes
    cutoff = now_ms - retention.retention_ms if retention.retention_ms >= 0 else None
    victims = superseded
    for m in walk():
        if m.state != S.COPY_SEGMENT_FINISHED or not referenced(m):
            continue  # superseded ones are victims already
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
        victims.append((m, reason))
        if excess is not None:
            excess -= m.segment_size_in_bytes
    return sorted(victims, key=lambda v: v[0].start_offset)


class Lineage:
    """A leader's epoch lineage (its leader-epoch checkpoint and log end), prepared once
    for a round that judges every kept segment against it (``cuts``)."""

    __slots__ = ("_ends", "_starts", "earliest", "latest")

    def __init__(self, epochs: Sequence[EpochStart], log_end_offset: int) -> None:
        self._starts = {e.epoch: e.start_offset for e in epochs}
        self._ends = epoch_end_offsets(epochs, log_end_offset)
        self.earliest = epochs[0].epoch if epochs else None
        self.latest = epochs[-1].epoch if epochs else None

    def cuts(self, segment: SegmentFacts) -> bool:
        """True when ``segment`` holds records of an epoch the lineage skips, or records
        before the lineage starts that epoch or after it ends it. Epochs newer than the
        leader's newest say nothing (the leader's view is behind, not the segment), nor
        does the end of the leader's own newest epoch (its log end may be read short
        while the broker writes)."""
        earliest, latest = self.earliest, self.latest
        if earliest is None or latest is None:
            return False
        starts, ends = self._starts, self._ends
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


def off_lineage(segment: SegmentFacts, epochs: Sequence[EpochStart], log_end_offset: int) -> bool:
    """True when ``segment`` holds records the leader's lineage ``epochs`` (its
    leader-epoch checkpoint) does not (see ``Lineage.cuts``)."""
    return Lineage(epochs, log_end_offset).cuts(segment)


__all__ = ["Lineage", "SegmentFacts", "Victim", "off_lineage", "plan_expiry"]
