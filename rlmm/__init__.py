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

# The manager and its parts load on first use: ``remote`` imports rlmm.model, and
# must not pull the event log and snapshot stack in with it.
_LAZY = {
    "RemoteLogMetadataManager": "rlmm.base",
    "OffloadMetadataManager": "rlmm.offload_metadata",
    "TopicBasedRemoteLogMetadataManager": "rlmm.manager",
    "ManagerStats": "rlmm.manager",
    "NotReadyRlmm": "rlmm.facade",
    "SwappableRlmm": "rlmm.facade",
    "SnapshotPolicy": "rlmm.snapshotting",
    "RlmmConfig": "rlmm.config",
    "load_config": "rlmm.config",
    "encode": "rlmm.codec",
    "decode": "rlmm.codec",
    "metadata_partition_for": "rlmm.partitioning",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlmm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "CodecError",
    "ConfigError",
    "InvalidStateTransitionError",
    "ManagerStats",
    "NotReadyRlmm",
    "OffloadMetadataManager",
    "RemoteLogMetadata",
    "RemoteLogMetadataManager",
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
    "RlmmConfig",
    "SnapshotPolicy",
    "SwappableRlmm",
    "TopicBasedRemoteLogMetadataManager",
    "TopicIdPartition",
    "decode",
    "encode",
    "load_config",
    "metadata_partition_for",
]
