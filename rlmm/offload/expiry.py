"""Which remote segments retention deletes (Kafka's RLMExpirationTask, as a pure function).

Invariants: only COPY_SEGMENT_FINISHED segments are victims; the walk goes oldest
first and stops at the first segment retention keeps, and at the first segment not
older than one still being copied (as Kafka's does); a FINISHED segment no offset of
which is served any more (superseded by a newer leader's copy) is a victim wherever
it is, since no reader can reach it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rlmm.offload.source import RetentionSettings

S = RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class Victim:
    segment: RemoteLogSegmentMetadata
    reason: str  # "log-start", "retention.ms", "retention.bytes" or "superseded"


def plan_expiry(
    segments: Iterable[RemoteLogSegmentMetadata],
    *,
    referenced: Callable[[RemoteLogSegmentMetadata], bool],
    retention: RetentionSettings,
    log_start_offset: int,
    local_only_bytes: int,
    now_ms: int,
) -> list[Victim]:
    """The segments to delete, oldest first."""
    listed = sorted(segments, key=lambda m: (m.start_offset, m.end_offset))
    copying = [m.start_offset for m in listed if m.state == S.COPY_SEGMENT_STARTED]
    walk_limit = min(copying) if copying else None
    finished = [m for m in listed if m.state == S.COPY_SEGMENT_FINISHED]
    live = [m for m in finished if referenced(m)]
    victims = [Victim(m, "superseded") for m in finished if not referenced(m)]
    excess = None
    if retention.retention_bytes >= 0:
        remote_bytes = sum(m.segment_size_in_bytes for m in live)
        excess = local_only_bytes + remote_bytes - retention.retention_bytes
    cutoff = now_ms - retention.retention_ms if retention.retention_ms >= 0 else None
    for m in live:
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


__all__ = ["Victim", "plan_expiry"]
