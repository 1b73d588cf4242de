"""OffloadMetadataManager: Kafka's RemoteLogMetadataManager plus what the offloader needs.

Invariant: this module imports only rlmm.base, rlmm.model and the cache's public
``SegmentSummary`` of the project, so the offloader (``rlmm.offload``), gc
(``rlmm.ops.repair``) and the fail-closed facade (``rlmm.facade``) type against it and
never against the topic-based manager. Every call is a method (or property) of the ABC:
an implementation defines each one itself, and mypy checks every call made through it.

What it adds to Kafka's interface: a lifecycle (``start``, ``wait_until_ready``), the
applied offsets that tell a caller the metadata has not changed, and cheap walks and
counts over one partition's segments, read from the cache's columns (the offloader scans
a large archive every round, so it holds one object at a time, not a list of them all).

Contract, beside Kafka's (``rlmm.base``): the walks, counts and ``contiguous_end_offset``
raise as the reads do (``RemoteResourceNotFoundError`` for a partition not assigned,
the retriable ``RemoteStorageNotReadyError`` for one not ready); ``applied_offsets``,
``applied_offset_of`` and ``assigned_partitions`` never raise, and a manager that serves
nothing answers them empty (as ``is_ready`` answers False). A walk follows the cache's
rows as they were when it started: walk it to its end, or drop it, before the next
``await``. A metadata partition that Kafka refuses to let the manager read (an ACL, a
credential) keeps its user partitions not ready and is asked again every
``AUTH_RETRY_S``; a caller refused the same way retries at the same pace.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator

from rlmm.base import RemoteLogMetadataManager
from rlmm.cache import SegmentSummary
from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

# A denied read (an ACL, a credential) is retried this often, not in a tight loop.
AUTH_RETRY_S = 30.0

States = frozenset[RemoteLogSegmentState]


class OffloadMetadataManager(RemoteLogMetadataManager):
    """A RemoteLogMetadataManager that an offloader can drive: it starts, waits for its
    partitions, and walks and counts their segments without building them all."""

    # ---- lifecycle ------------------------------------------------------------------------

    @abstractmethod
    async def start(self) -> None:
        """Start serving (the event log, the state from a snapshot). Idempotent."""

    @abstractmethod
    async def wait_until_ready(self, tps: Iterable[TopicIdPartition], timeout_s: float) -> None:
        """Return once every given (assigned) partition is ready; raise
        ``RemoteStorageTimeoutError`` after ``timeout_s``, or at once what keeps one from
        ever being ready (not assigned, refused, a manager that serves nothing)."""

    # ---- what the metadata has applied ----------------------------------------------------

    @property
    @abstractmethod
    def applied_offsets(self) -> dict[int, int]:
        """Metadata partition -> the offset applied so far (a copy; empty: none)."""

    @abstractmethod
    def applied_offset_of(self, tp: TopicIdPartition) -> int | None:
        """The offset applied so far in ``tp``'s metadata partition (None: not assigned).
        While this value holds, ``tp``'s metadata has not changed."""

    @abstractmethod
    async def applied_moved(self) -> None:
        """Return once some metadata partition's applied offset has moved since the call
        (a manager that serves nothing never returns)."""

    @abstractmethod
    def metadata_position_of(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        """``tp``'s metadata partition and the offset applied there so far (-1: none yet);
        None: not assigned. A version of ``tp``'s metadata: while the offset holds, what
        the lookups answer for ``tp`` has not changed (``rlmm serve`` tags its listings
        with it, so the broker's bridge can keep them until the offset moves)."""

    @property
    @abstractmethod
    def assigned_partitions(self) -> set[TopicIdPartition]:
        """The user partitions assigned (led or followed), ready or not (a copy)."""

    # ---- walks and counts of one partition's segments --------------------------------------

    @abstractmethod
    def walk_remote_log_segments(
        self,
        tp: TopicIdPartition,
        states: States | None = None,
        *,
        unsigned_only: bool = False,
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """The segments of ``tp`` (all, or those in ``states``; with ``unsigned_only``,
        only those whose id lacks rlmm's signature) by start offset, then end offset,
        each built as the walk reaches it."""

    @abstractmethod
    def walk_segment_summaries(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> Iterator[SegmentSummary]:
        """As ``walk_remote_log_segments``, each segment as a ``SegmentSummary`` (state,
        offsets, max timestamp, size, whether a lookup still finds it)."""

    @abstractmethod
    def remote_log_segment_count(self, tp: TopicIdPartition, states: States | None = None) -> int:
        """How many segments ``tp`` has (in ``states``, if given)."""

    @abstractmethod
    def oldest_max_timestamp_ms(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> int | None:
        """The smallest max timestamp among ``tp``'s segments (in ``states``, if given);
        None when there is no such segment."""

    @abstractmethod
    def contiguous_end_offset(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> int | None:
        """The end offset that ``tp``'s segments (in ``states``, if given), taken by start
        offset from the lowest, reach before their first gap; None when there is none."""


__all__ = ["AUTH_RETRY_S", "OffloadMetadataManager", "States"]
