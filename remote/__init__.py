"""Remote storage (KIP-405 RemoteStorageManager: local dir, S3) and Kafka segment files.

Where things live: ``storage`` (the RSM ABC and Kafka's API types), ``naming``,
``manifest`` and ``streams`` (what every backend shares), one module per backend
(``local``, ``s3``), ``layouts/`` (the read side of every layout), ``registry`` (every
``remote.type`` and the factories), ``segments/`` (Kafka's segment files).

Invariant: ``remote`` imports no sibling package except ``rlmm.model`` / ``rlmm.errors``;
backends (``LocalRemoteStorageManager``, ``S3RemoteStorageManager``, which loads boto3)
and the ``remote.segments`` names load on first use, so ``import remote`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from remote.errors import (
    CorruptObjectError,
    InvalidRangeError,
    InvalidRemotePathError,
    InvalidSegmentDataError,
    RemoteIntegrityError,
    RemoteObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageUnavailableError,
    SegmentFormatError,
)
from remote.manifest import SegmentManifest
from remote.registry import REMOTE_TYPES, load_remote_storage_manager
from remote.storage import IndexType, LogSegmentData, RemoteStorageManager

# Names of remote.segments re-exported here (resolved lazily by __getattr__ below).
_SEGMENT_NAMES = (
    "CODECS",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "AbortedTxn",
    "EpochEntry",
    "LogSegmentFiles",
    "LogSegmentSummary",
    "OffsetIndexEntry",
    "PartitionDir",
    "PartitionDirWriter",
    "PartitionMetadata",
    "ProducerRecord",
    "ProducerStateEntry",
    "Record",
    "RecordBatchHeader",
    "RecordBatchReader",
    "TimeIndexEntry",
    "available_codecs",
    "decode_batch",
    "encode_leader_epoch_checkpoint",
    "encode_offset_index",
    "encode_partition_metadata",
    "encode_producer_snapshot",
    "encode_time_index",
    "encode_txn_index",
    "generate_records",
    "iter_batch_headers",
    "iter_records",
    "leader_epochs_in_range",
    "lookup_offset",
    "offset_file_name",
    "parse_partition_dir_name",
    "read_leader_epoch_checkpoint",
    "read_offset_index",
    "read_partition_metadata",
    "read_producer_snapshot",
    "read_time_index",
    "read_txn_index",
)


def __getattr__(name: str) -> Any:
    # Backends load on first use (s3 pulls in boto3), through the registry.
    for entry in REMOTE_TYPES.values():
        if entry.storage_manager is not None and entry.storage_manager.endswith(f":{name}"):
            return entry.storage_manager_class()
    if not name.startswith("_"):
        # Any public name of remote.segments, including ones added after this list.
        import remote.segments as segments

        if name in getattr(segments, "__all__", ()):
            return getattr(segments, name)
    raise AttributeError(f"module 'remote' has no attribute {name!r}")


__all__ = [
    "CorruptObjectError",
    "IndexType",
    "InvalidRangeError",
    "InvalidRemotePathError",
    "InvalidSegmentDataError",
    "LocalRemoteStorageManager",
    "LogSegmentData",
    "RemoteIntegrityError",
    "RemoteObjectExistsError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "RemoteStorageUnavailableError",
    "S3RemoteStorageManager",
    "SegmentFormatError",
    "SegmentManifest",
    "load_remote_storage_manager",
    *_SEGMENT_NAMES,
]
