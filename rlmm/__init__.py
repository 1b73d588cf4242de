"""rlmm: Kafka tiered storage (KIP-405) — the topic-based RemoteLogMetadataManager.

Invariant: importing rlmm never imports rlmm.offload, rlmm.spark or rlmm.cli (the
outermost layer), so ``remote`` may import ``rlmm.model`` without a cycle.
"""

from __future__ import annotations

from rlmm.errors import (
    CodecError,
    ConfigError,
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    RemoteStorageTimeoutError,
)
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

__all__ = [
    "CodecError",
    "ConfigError",
    "InvalidStateTransitionError",
    "RemoteLogMetadata",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageNotReadyError",
    "RemoteStorageTimeoutError",
    "TopicIdPartition",
]
