"""LogSource: what the offloader needs to know about one local partition log.

A broker written in Python implements it over its own log; the sidecar's
implementation (``rlmm.offload.logdir``) reads a Kafka log dir. Invariant: a source
only describes; it never deletes or changes local files, and every method reads the
current state (the offloader calls it once per round, never caches across rounds),
except ``change_token``: two equal tokens promise that every other method would answer
the same, so a round that found nothing to do need not be run again (None: no promise).
"""

from __future__ import annotations

import abc
import bisect
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from remote import LogSegmentData
from rlmm.model import TopicIdPartition

UNLIMITED = -1
"""Kafka's value for "no limit" in ``retention.ms`` / ``retention.bytes``."""
USE_RETENTION = -2
"""Kafka's ``local.retention.*`` default: follow the whole-log retention."""


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """A topic's tiering settings (retention, KIP-950's switches, KIP-1241's copy
    delay), with Kafka's names and meanings (-1 unlimited, -2 inherit)."""

    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = UNLIMITED
    local_retention_ms: int = USE_RETENTION
    local_retention_bytes: int = USE_RETENTION
    remote_storage_enable: bool = True
    # KIP-950: copying stopped (remote data stays readable and expires), and, with
    # remote_storage_enable false, the remote data deleted.
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    # KIP-1241: a rolled segment waits until it is this old (by its largest timestamp)
    # or this many bytes behind the log end; 0 at once, -1 the local retention
    # (rlmm.offload.copy_delay). Kafka's defaults: copied at once.
    remote_copy_lag_ms: int = 0
    remote_copy_lag_bytes: int = UNLIMITED

    def effective_local_retention_ms(self) -> int:
        return (
            self.retention_ms
            if self.local_retention_ms == USE_RETENTION
            else self.local_retention_ms
        )

    def effective_local_retention_bytes(self) -> int:
        if self.local_retention_bytes == USE_RETENTION:
            return self.retention_bytes
        return self.local_retention_bytes


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """A rolled local segment: ``next_base_offset`` is the base of the segment after it."""

    base_offset: int
    next_base_offset: int
    size_in_bytes: int
    name: str


@dataclass(frozen=True, slots=True)
class SegmentDescription:
    """What a copy publishes and uploads for one segment (offsets inclusive)."""

    base_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    txn_index_empty: bool
    data: LogSegmentData


@dataclass(frozen=True, slots=True)
class EpochStart:
    """A leader epoch and the first offset written in it (leader-epoch-checkpoint)."""

    epoch: int
    start_offset: int


def _next_base(segment: LocalSegment) -> int:
    return segment.next_base_offset


@dataclass(frozen=True, slots=True)
class LogView:
    """One consistent read of a LogSource (a round takes it in a worker thread).

    ``rolled`` may build its items as they are read (the sidecar's does: a local log
    that keeps thousands of segments would otherwise cost an object and a path per
    segment on every round, freed at once but resident in proportion to the log). The
    methods below bisect it, so a round reads only the segments it acts on.
    """

    rolled: Sequence[LocalSegment]
    epochs: Sequence[EpochStart]
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    active_size: int  # bytes in the active segment

    @property
    def local_start_offset(self) -> int:
        """The first local offset (the log end when no segment is rolled)."""
        return self.rolled[0].base_offset if self.rolled else self.log_end_offset

    def _first_holding(self, offset: int) -> int:
        """Index of the first rolled segment holding offsets at or after ``offset``."""
        return bisect.bisect_right(self.rolled, offset, key=_next_base)

    def rolled_from(self, offset: int) -> Iterator[LocalSegment]:
        """Rolled segments holding offsets at or after ``offset`` and wholly below the
        last stable offset (what a copy may upload), in offset order."""
        rolled = self.rolled
        for i in range(self._first_holding(offset), len(rolled)):
            segment = rolled[i]
            if segment.next_base_offset > self.last_stable_offset:
                return
            yield segment

    def local_bytes_from(self, offset: int) -> int:
        """Bytes of the local segments holding offsets at or after ``offset``, and of the
        active one unless ``offset`` is past the log end."""
        rolled = self.rolled
        first = self._first_holding(offset)
        rolled_bytes = sum(rolled[i].size_in_bytes for i in range(first, len(rolled)))
        return rolled_bytes + (self.active_size if self.log_end_offset >= offset else 0)


class LogSource(abc.ABC):
    """One local partition log, as the offloader sees it."""

    @property
    @abc.abstractmethod
    def topic_id_partition(self) -> TopicIdPartition:
        """The partition this log belongs to."""

    @abc.abstractmethod
    def rolled_segments(self) -> Sequence[LocalSegment]:
        """Every rolled (non-active) segment, ascending by base offset."""

    @abc.abstractmethod
    def active_segment_base_offset(self) -> int:
        """Base offset of the active segment (never copied)."""

    @abc.abstractmethod
    def log_start_offset(self) -> int:
        """The log start offset of the whole log (local and remote)."""

    @abc.abstractmethod
    def log_end_offset(self) -> int:
        """The offset after the last record written locally."""

    @abc.abstractmethod
    def last_stable_offset(self) -> int:
        """No segment reaching this offset or beyond is copied (open transactions, HW)."""

    @abc.abstractmethod
    def leader_epochs(self) -> Sequence[EpochStart]:
        """The leader-epoch cache, ascending."""

    @abc.abstractmethod
    def current_leader_epoch(self) -> int:
        """The epoch this broker leads the partition in."""

    @abc.abstractmethod
    def retention(self) -> RetentionSettings:
        """The topic's retention settings."""

    @abc.abstractmethod
    def describe(self, segment: LocalSegment) -> SegmentDescription:
        """Read and check the segment's files; raise SegmentCopyError naming a bad file."""

    def largest_timestamp(self, segment: LocalSegment) -> int | None:
        """The largest record timestamp of the rolled ``segment`` (Kafka's
        ``LogSegment.largestTimestamp``), for KIP-1241's copy delay; None when it cannot
        be read. By default from ``describe``; a source that reads it cheaper overrides
        it (asked only of a segment the delay may hold back)."""
        return self.describe(segment).max_timestamp_ms

    def local_size_from(self, offset: int) -> int:
        """Bytes of local segments (active included) holding offsets at or after ``offset``."""
        total = 0
        for seg in self.rolled_segments():
            if seg.next_base_offset > offset:
                total += seg.size_in_bytes
        return total + self.active_segment_size()

    def active_segment_size(self) -> int:
        """Bytes in the active segment (0 when unknown)."""
        return 0

    def view(self) -> LogView:
        """What a round reads of this log, together (a source may answer it from one
        read of its files)."""
        rolled = self.rolled_segments()
        end = self.log_end_offset()
        return LogView(
            rolled,
            self.leader_epochs(),
            self.log_start_offset(),
            end,
            self.last_stable_offset(),
            self.active_segment_size(),
        )

    def change_token(self) -> Hashable | None:
        """A value that changes whenever any answer of this source may change (None: no
        such promise, the default). Cheap: the offloader asks it of every partition each
        round, and skips a partition whose last round did nothing while it is unchanged."""
        return None


def epoch_end_offsets(epochs: Sequence[EpochStart], log_end_offset: int) -> dict[int, int]:
    """Each epoch's end offset (exclusive): the next epoch's start, or the log end."""
    out: dict[int, int] = {}
    for i, entry in enumerate(epochs):
        out[entry.epoch] = epochs[i + 1].start_offset if i + 1 < len(epochs) else log_end_offset
    return out


__all__ = [
    "UNLIMITED",
    "USE_RETENTION",
    "EpochStart",
    "LocalSegment",
    "LogSource",
    "RetentionSettings",
    "SegmentDescription",
    "epoch_end_offsets",
]
