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
