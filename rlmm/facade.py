"""Fail-closed facade: NotReadyRlmm until the real manager is ready, then a swap.

Invariant: SwappableRlmm reads its target once per call, so every call runs wholly
against the old or wholly against the new target, never a mix (a walk too walks one
target's segments), and a swap never makes a call fail; NotReadyRlmm raises
RemoteStorageNotReadyError for everything that reads, writes, assigns or waits, and
answers what it applies and serves with nothing (``is_ready`` False, no applied offset,
no partition assigned). Both implement the OffloadMetadataManager interface (Kafka's
RemoteLogMetadataManager and what the offloader needs beyond it) method by method, so
mypy checks every call made through them, the offloader's included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Iterator
from typing import Any

from rlmm.cache import SegmentSummary
from rlmm.errors import RemoteStorageNotReadyError
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from rlmm.offload_metadata import OffloadMetadataManager, States


class NotReadyRlmm(OffloadMetadataManager):
    """The RLMM a broker starts with: every call fails closed, retriably."""

    def __init__(self, reason: str = "the remote log metadata manager is starting") -> None:
        self.reason = reason

    def _not_ready(self) -> RemoteStorageNotReadyError:
        return RemoteStorageNotReadyError(message=self.reason)

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise self._not_ready()

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        raise self._not_ready()

    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        raise self._not_ready()

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        raise self._not_ready()

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        raise self._not_ready()

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        raise self._not_ready()

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int | None = None) -> int:
        raise self._not_ready()

    def next_segment_with_txn_index(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        raise self._not_ready()

    def remote_partition_delete_state(
        self, tp: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        raise self._not_ready()

    async def on_partition_leadership_changes(
        self,
        leader_partitions: Iterable[TopicIdPartition],
        follower_partitions: Iterable[TopicIdPartition],
    ) -> None:
        raise self._not_ready()

    async def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        raise self._not_ready()

    def is_ready(self, tp: TopicIdPartition) -> bool:
        return False

    async def close(self) -> None:
        return None

    async def start(self) -> None:
        return None  # nothing to start: it serves nothing, ever

    async def wait_until_ready(self, tps: Iterable[TopicIdPartition], timeout_s: float) -> None:
        raise self._not_ready()

    @property
    def applied_offsets(self) -> dict[int, int]:
        return {}

    def applied_offset_of(self, tp: TopicIdPartition) -> int | None:
        return None

    async def applied_moved(self) -> None:
        await asyncio.Event().wait()  # nothing is ever applied here

    def metadata_position_of(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        return None

    @property
    def assigned_partitions(self) -> set[TopicIdPartition]:
        return set()

    def walk_remote_log_segments(
        self,
        tp: TopicIdPartition,
        states: States | None = None,
        *,
        unsigned_only: bool = False,
    ) -> Iterator[RemoteLogSegmentMetadata]:
        raise self._not_ready()

    def walk_segment_summaries(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> Iterator[SegmentSummary]:
        raise self._not_ready()

    def remote_log_segment_count(self, tp: TopicIdPartition, states: States | None = None) -> int:
        raise self._not_ready()

    def oldest_max_timestamp_ms(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> int | None:
        raise self._not_ready()

    def contiguous_end_offset(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> int | None:
        raise self._not_ready()


class SwappableRlmm(OffloadMetadataManager):
    """Delegates every call to the current target; ``swap`` replaces it atomically.

    The writes (and ``start``, ``wait_until_ready``) are plain methods that return the
    target's coroutine: the target is chosen when the call is made, as for the reads,
    not when it is first awaited.
    """

    def __init__(self, initial: OffloadMetadataManager | None = None) -> None:
        self._target: OffloadMetadataManager = initial if initial is not None else NotReadyRlmm()

    @property
    def target(self) -> OffloadMetadataManager:
        return self._target

    def swap(self, new: OffloadMetadataManager) -> OffloadMetadataManager:
        """Install ``new``; returns the previous target (the caller closes it)."""
        old, self._target = self._target, new
        return old

    def add_remote_log_segment_metadata(
        self, metadata: RemoteLogSegmentMetadata
    ) -> Coroutine[Any, Any, None]:
        return self._target.add_remote_log_segment_metadata(metadata)

    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> Coroutine[Any, Any, None]:
        return self._target.update_remote_log_segment_metadata(update)

    def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> Coroutine[Any, Any, None]:
        return self._target.put_remote_partition_delete_metadata(metadata)

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._target.remote_log_segment_metadata(tp, leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        return self._target.highest_offset_for_epoch(tp, leader_epoch)

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        return self._target.list_remote_log_segments(tp, leader_epoch)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int | None = None) -> int:
        return self._target.remote_log_size(tp, leader_epoch)

    def next_segment_with_txn_index(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._target.next_segment_with_txn_index(tp, leader_epoch, offset)

    def remote_partition_delete_state(
        self, tp: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        return self._target.remote_partition_delete_state(tp)

    def on_partition_leadership_changes(
        self,
        leader_partitions: Iterable[TopicIdPartition],
        follower_partitions: Iterable[TopicIdPartition],
    ) -> Coroutine[Any, Any, None]:
        return self._target.on_partition_leadership_changes(leader_partitions, follower_partitions)

    def on_stop_partitions(
        self, partitions: Iterable[TopicIdPartition]
    ) -> Coroutine[Any, Any, None]:
        return self._target.on_stop_partitions(partitions)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        return bool(self._target.is_ready(tp))

    async def close(self) -> None:
        await self._target.close()

    def start(self) -> Coroutine[Any, Any, None]:
        return self._target.start()

    def wait_until_ready(
        self, tps: Iterable[TopicIdPartition], timeout_s: float
    ) -> Coroutine[Any, Any, None]:
        return self._target.wait_until_ready(tps, timeout_s)

    @property
    def applied_offsets(self) -> dict[int, int]:
        return self._target.applied_offsets

    def applied_offset_of(self, tp: TopicIdPartition) -> int | None:
        return self._target.applied_offset_of(tp)

    def applied_moved(self) -> Coroutine[Any, Any, None]:
        return self._target.applied_moved()

    def metadata_position_of(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        return self._target.metadata_position_of(tp)

    @property
    def assigned_partitions(self) -> set[TopicIdPartition]:
        return self._target.assigned_partitions

    def walk_remote_log_segments(
        self,
        tp: TopicIdPartition,
        states: States | None = None,
        *,
        unsigned_only: bool = False,
    ) -> Iterator[RemoteLogSegmentMetadata]:
        return self._target.walk_remote_log_segments(tp, states, unsigned_only=unsigned_only)

    def walk_segment_summaries(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> Iterator[SegmentSummary]:
        return self._target.walk_segment_summaries(tp, states)

    def remote_log_segment_count(self, tp: TopicIdPartition, states: States | None = None) -> int:
        return self._target.remote_log_segment_count(tp, states)

    def oldest_max_timestamp_ms(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> int | None:
        return self._target.oldest_max_timestamp_ms(tp, states)

    def contiguous_end_offset(
        self, tp: TopicIdPartition, states: States | None = None
    ) -> int | None:
        return self._target.contiguous_end_offset(tp, states)


__all__ = ["NotReadyRlmm", "SwappableRlmm"]
