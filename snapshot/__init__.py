"""Snapshots of the RLMM cache: file format, the SnapshotStore ABC and its backends.

Where things live: ``format`` (the file format), ``store`` (the SnapshotStore ABC),
one module per backend (``local``: one directory; ``s3``: write-once objects in a
bucket), ``registry`` (every snapshot store type: ``load_snapshot_store`` builds the
configured one), ``errors``. Backends load on first use.

Invariant: this package imports no sibling package (snapshot is a leaf); the state
it stores is an opaque msgpack-serialisable object owned by the caller. Every
backend keeps, per owner, the newest ``keep`` valid snapshots, never deletes the
newest valid one, and ``load_latest`` skips (with a warning) anything it cannot
decode instead of raising.
"""

from __future__ import annotations

from typing import Any

from snapshot.errors import (
    SnapshotConfigError,
    SnapshotCorruptError,
    SnapshotEncodeError,
    SnapshotError,
    SnapshotInvalidError,
    SnapshotStoreError,
    SnapshotVersionError,
)
from snapshot.format import (
    FORMAT_VERSION,
    MAGIC,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    encode_snapshot_parts,
    verify_snapshot,
)
from snapshot.registry import (
    SNAPSHOT_STORE_BACKENDS,
    SNAPSHOT_STORE_TYPES,
    backend,
    load_snapshot_store,
)
from snapshot.store import SnapshotStore, SnapshotStoreStats


def __getattr__(name: str) -> Any:
    # Backends load on first use (s3 pulls in botocore).
    for kind, path in SNAPSHOT_STORE_BACKENDS.items():
        if path.endswith(f":{name}"):
            return backend(kind)
    raise AttributeError(f"module 'snapshot' has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "SNAPSHOT_STORE_TYPES",
    "LocalSnapshotStore",
    "S3SnapshotStore",
    "Snapshot",
    "SnapshotConfigError",
    "SnapshotCorruptError",
    "SnapshotEncodeError",
    "SnapshotError",
    "SnapshotInvalidError",
    "SnapshotStore",
    "SnapshotStoreError",
    "SnapshotStoreStats",
    "SnapshotVersionError",
    "decode_snapshot",
    "encode_snapshot",
    "encode_snapshot_parts",
    "load_snapshot_store",
    "verify_snapshot",
]
