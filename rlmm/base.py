"""RemoteLogMetadataManager: Kafka's KIP-405 interface, in snake_case.

Invariant: this module imports only rlmm.model (and so rlmm.errors) of the project, so
anything may type against it. Every metadata manager implements it (the topic-based
manager, the fail-closed facades); a caller that holds one can make exactly these calls,
and mypy checks each of them.

Contract (Kafka's, with rlmm's choices): a write is a coroutine that returns once the
event is durable and visible to this manager's own reads, and raises
``InvalidStateTransitionError`` for an illegal transition; reads are plain synchronous
lookups. A partition that is not assigned raises ``RemoteResourceNotFoundError``; one
that is assigned but not ready (catching up, denied, the manager starting) raises the
retriable ``RemoteStorageNotReadyError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)


class RemoteLogMetadataManager(ABC):
    """Kafka's ``RemoteLogMetadataManager``: remote segments' metadata, per user partition."""

    # ---- writes (Kafka's addRemoteLogSegmentMetadata, ...) --------------------------------

    @abstractmethod
    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Add a new segment, in COPY_SEGMENT_STARTED."""

    @abstractmethod
    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        """Move a known segment to its next state."""

    @abstractmethod
    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        """Record a state of a user partition's deletion from remote storage."""

    # ---- reads ------------------------------------------------------------------------------

    @abstractmethod
    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` in ``leader_epoch``, if any."""

    @abstractmethod
    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        """The highest offset copied for ``leader_epoch``, or None."""

    @abstractmethod
    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """All segments of ``tp`` (or those carrying ``leader_epoch``), by start offset."""

    @abstractmethod
    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int | None = None) -> int:
        """Summed size in bytes of the segments :meth:`list_remote_log_segments` lists."""

    @abstractmethod
    def next_segment_with_txn_index(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The first finished segment of the epoch at or after ``offset`` with a txn index."""

    @abstractmethod
    def remote_partition_delete_state(
        self, tp: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        """The latest partition delete state of ``tp``, if any."""

    # ---- assignment and lifecycle ---------------------------------------------------------

    @abstractmethod
    async def on_partition_leadership_changes(
        self,
        leader_partitions: Iterable[TopicIdPartition],
        follower_partitions: Iterable[TopicIdPartition],
    ) -> None:
        """Start serving these user partitions (each is ready once caught up)."""

    @abstractmethod
    async def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop serving these user partitions."""

    @abstractmethod
    def is_ready(self, tp: TopicIdPartition) -> bool:
        """True when reads of ``tp`` answer (assigned and caught up)."""

    @abstractmethod
    async def close(self) -> None:
        """Release everything this manager started. Idempotent."""


__all__ = ["RemoteLogMetadataManager"]
