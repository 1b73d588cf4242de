"""Snapshots of the RLMM cache: file format, the SnapshotStore ABC and its backends.

Where things live: ``format`` (the file format), ``store`` (the SnapshotStore ABC),
one module per backend (``local``: one directory; ``s3``: write-once objects in a
bucket), ``registry`` (every snapshot store type: ``load_snapshot_store`` builds the
configured one), ``errors``. The package imports no backend: import
``LocalSnapshotStore`` from ``snapshot.local`` and ``S3SnapshotStore`` (which loads
botocore) from ``snapshot.s3``.

Invariant: this package imports no sibling package (snapshot is a leaf); the state
it stores is an opaque msgpack-serialisable object owned by the caller. Every
backend keeps, per owner, the newest ``keep`` valid snapshots, never deletes the
newest valid one, and ``load_latest`` skips (with a warning) anything it cannot
decode instead of raising.
"""

from __future__ import annotations

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
    Packable,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    encode_snapshot_parts,
    verify_snapshot,
)
from snapshot.registry import SNAPSHOT_STORE_TYPES, load_snapshot_store
from snapshot.store import SnapshotStore, SnapshotStoreStats

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "SNAPSHOT_STORE_TYPES",
    "Packable",
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
