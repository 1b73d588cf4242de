"""rlmm: Kafka tiered storage (KIP-405) — the topic-based RemoteLogMetadataManager.

The package offers the KIP-405 API types (``rlmm.model``) and errors (``rlmm.errors``)
and nothing else: the rest of rlmm is imported from its modules (the interfaces from
``rlmm.base`` and ``rlmm.offload_metadata``, the manager from ``rlmm.manager``, the
facade from ``rlmm.facade``, configuration from ``rlmm.config``, the codec from
``rlmm.codec``, the partitioner from ``rlmm.partitioning``).

Invariant: importing rlmm imports rlmm.model and rlmm.errors and nothing more, so
``remote`` may import ``rlmm.model`` without a cycle and without the event log and
snapshot stack.
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
