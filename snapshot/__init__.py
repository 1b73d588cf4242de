"""Snapshots of the RLMM cache: file format and atomic store (knows bytes + offsets).

Invariant: this package imports no sibling package (snapshot is a leaf); the state
it stores is an opaque msgpack-serialisable object owned by the caller.
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
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    encode_snapshot_parts,
    verify_snapshot,
)
from snapshot.store import SnapshotStore, SnapshotStoreStats

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
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
    "verify_snapshot",
]
