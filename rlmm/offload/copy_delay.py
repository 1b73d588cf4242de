"""When a rolled segment may be copied: KIP-1241's delayed upload (Kafka 4.4).

Job: a topic's ``remote.copy.lag.ms`` and ``remote.copy.lag.bytes``, resolved as Kafka
resolves them (``CopyDelay.of``), and the rule a copy round applies to its candidates,
oldest first (``hold_back``), as Kafka's ``RLMCopyTask.candidateLogSegments`` does.

Invariants:
- ``-1`` stands for the topic's local retention (``local.retention.ms`` /
  ``local.retention.bytes``, whose ``-2`` follows ``retention.*``). A setting that
  resolves to 0 lets every segment go at once, whatever the other says; one that
  resolves to a negative value (unlimited) turns its own check off;
- a segment may be copied when either check that is on passes: the time check once
  its largest record timestamp is ``remote.copy.lag.ms`` old (a timestamp that cannot
  be read, or lies in the future, passes, as in Kafka), the size check once the local
  log holds at least ``remote.copy.lag.bytes`` after it (the later segments, the
  active one included);
- with both checks off nothing is copied (Kafka: "delay forever");
- the first segment held back holds back every later one: the archive stays
  contiguous, and its end moves only forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlmm.offload.log_source import LocalSegment, RetentionSettings

FOLLOW_LOCAL_RETENTION = -1
"""``remote.copy.lag.*``'s ``-1``: as long as the topic's local retention."""


@dataclass(frozen=True, slots=True)
class CopyDelay:
    """A topic's copy delay, resolved: 0 copies at once, a positive value is the
    check's bound, a negative one turns that check off."""

    lag_ms: int
    lag_bytes: int

    @classmethod
    def of(cls, settings: RetentionSettings) -> CopyDelay:
        ms, nbytes = settings.remote_copy_lag_ms, settings.remote_copy_lag_bytes
        if ms == FOLLOW_LOCAL_RETENTION:
            ms = settings.effective_local_retention_ms()
        if nbytes == FOLLOW_LOCAL_RETENTION:
            nbytes = settings.effective_local_retention_bytes()
        return cls(ms, nbytes)

    @property
    def immediate(self) -> bool:
        """Every rolled segment may be copied at once (Kafka's default)."""
        return self.lag_ms == 0 or self.lag_bytes == 0

    def time_passes(self, largest_timestamp_ms: int | None, now_ms: int) -> bool:
        """The time check is on and passes for a segment of this largest timestamp."""
        if self.lag_ms <= 0:
            return False
        if largest_timestamp_ms is None:
            return True  # unreadable: let the copy read the segment and say why
        age = now_ms - largest_timestamp_ms
        return age < 0 or age >= self.lag_ms

    def size_passes(self, bytes_after: int) -> bool:
        """The size check is on and passes for a segment with ``bytes_after`` local
        bytes after it."""
        return self.lag_bytes > 0 and bytes_after >= self.lag_bytes

    def passes(self, largest_timestamp_ms: int | None, bytes_after: int, now_ms: int) -> bool:
        """The segment may be copied now."""
        return (
            self.immediate
            or self.size_passes(bytes_after)
            or self.time_passes(largest_timestamp_ms, now_ms)
        )

    def due_ms(self, largest_timestamp_ms: int | None) -> int | None:
        """When the time check will pass for a segment held back now (None: not by
        time; only the log growing past ``lag_bytes`` after it lets it go)."""
        if self.lag_ms <= 0 or largest_timestamp_ms is None:
            return None
        return largest_timestamp_ms + self.lag_ms


@dataclass(frozen=True, slots=True)
class HeldBack:
    """What the delay leaves of a round's candidates: the first ``copyable`` may be
    copied now, the ``held`` after them wait; ``due_ms``: when the first held one
    passes the time check (None: none held, or not by time)."""

    copyable: int
    held: int = 0
    due_ms: int | None = None


def hold_back(
    candidates: Sequence[LocalSegment],
    local_bytes_from_first: int,
    delay: CopyDelay,
    largest_timestamp: Callable[[LocalSegment], int | None],
    now_ms: int,
) -> HeldBack:
    """Apply ``delay`` to ``candidates`` (oldest first, contiguous): they may be copied
    up to the first that passes no check. ``local_bytes_from_first``: the local bytes
    from the first candidate's start to the log end, the active segment included.
    ``largest_timestamp`` (it reads files) is asked only when the time check decides."""
    if delay.immediate:
        return HeldBack(len(candidates))
    after = local_bytes_from_first
    for i, segment in enumerate(candidates):
        after -= segment.size_in_bytes
        if delay.size_passes(after):
            continue
        timestamp = largest_timestamp(segment) if delay.lag_ms > 0 else None
        if delay.time_passes(timestamp, now_ms):
            continue
        return HeldBack(i, len(candidates) - i, delay.due_ms(timestamp))
    return HeldBack(len(candidates))


def never_copied_problem(settings: RetentionSettings) -> str | None:
    """Why a topic's delay keeps its segments out of the archive for good, or None:
    both checks off, or a time bound at or past ``retention.ms`` (the round does not
    copy what retention would delete at once, and a broker that does not tier deletes
    its local segments by ``retention.ms``)."""
    delay = CopyDelay.of(settings)
    if delay.immediate:
        return None
    if delay.lag_ms < 0 and delay.lag_bytes < 0:
        return (
            f"remote.copy.lag.ms = {settings.remote_copy_lag_ms} and remote.copy.lag.bytes ="
            f" {settings.remote_copy_lag_bytes} resolve to unlimited (local retention -1):"
            " nothing is ever copied"
        )
    retention = settings.retention_ms
    if delay.lag_ms > 0 and 0 <= retention <= delay.lag_ms and delay.lag_bytes < 0:
        return (
            f"remote.copy.lag.ms resolves to {delay.lag_ms} ms, at or past retention.ms"
            f" ({retention}): no segment is copied before retention deletes it"
        )
    return None


__all__ = ["FOLLOW_LOCAL_RETENTION", "CopyDelay", "HeldBack", "hold_back", "never_copied_problem"]
