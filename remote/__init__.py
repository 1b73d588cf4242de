"""Remote storage (KIP-405 RemoteStorageManager: local dir, S3) and Kafka segment files.

Where things live: ``storage`` (the RSM ABC and Kafka's API types), ``naming``,
``manifest`` and ``streams`` (what every backend shares), one module per backend
(``local``, ``s3``), ``layouts/`` (the read side of every layout), ``registry`` (every
``remote.type`` and the factories), ``segments/`` (Kafka's segment files).

Invariant: ``remote`` imports no sibling package except ``rlmm.model`` / ``rlmm.errors``,
and ``import remote`` stays cheap: it loads no backend and not ``remote.segments``.
Import those from their modules: ``LocalRemoteStorageManager`` from ``remote.local``,
``S3RemoteStorageManager`` (which loads boto3) from ``remote.s3``, the segment files'
readers and writers from ``remote.segments``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from remote.registry import load_remote_storage_manager
from remote.storage import IndexType, LogSegmentData, RemoteStorageManager

if TYPE_CHECKING:  # what rlmm/offload/logdir.py imports, typed for mypy
    from remote.segments import PartitionDir as PartitionDir
    from remote.segments import read_producer_snapshot as read_producer_snapshot

# rlmm/offload/logdir.py still imports these two from here; the offloader's owners are
# moving that import to remote.segments (issue 45), then this goes. Loaded on use:
# remote.segments loads aiokafka's codecs, which ``import remote`` must not.
_STILL_IMPORTED = frozenset({"PartitionDir", "read_producer_snapshot"})


def __getattr__(name: str) -> object:
    if name not in _STILL_IMPORTED:
        raise AttributeError(f"module 'remote' has no attribute {name!r}")
    import remote.segments

    return getattr(remote.segments, name)


__all__ = [
    "CorruptObjectError",
    "IndexType",
    "InvalidRangeError",
    "InvalidRemotePathError",
    "InvalidSegmentDataError",
    "LogSegmentData",
    "RemoteIntegrityError",
    "RemoteObjectExistsError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "RemoteStorageUnavailableError",
    "SegmentFormatError",
    "SegmentManifest",
    "load_remote_storage_manager",
]
