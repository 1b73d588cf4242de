"""What a snapshot file of the manager holds: format, applied offsets, counts, checksum.

The library side of ``rlmm snapshot inspect``: snapshot files at a path, or the
snapshots kept in a store (the configured one: a directory, or an S3 bucket shared by
owners). Files and store objects go through the one decoder, so a snapshot reports
the same wherever it is kept.

Invariant: inspecting never raises for a bad snapshot: a truncated, corrupt,
newer-version, foreign or unreadable one gives a report with ``ok`` false and the
problem named; only a path that does not exist, or a store that cannot be listed, is
an error.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmm.cache import RemotePartitionMetadataStore
from rlmm.config import RlmmConfig
from rlmm.errors import RemoteStorageError, SnapshotBlockError
from rlmm.factory import open_snapshot_source
from snapshot import MAGIC, SnapshotError, SnapshotStore, decode_snapshot

_HEADER = struct.Struct(">8sHQ")


@dataclass(frozen=True)
class SnapshotReport:
    """One snapshot file, decoded as far as it can be."""

    path: str
    size_bytes: int
    ok: bool
    problem: str | None = None
    format_version: int | None = None
    created_ms: int | None = None
    partition_count: int | None = None
    applied_offsets: dict[int, int] = field(default_factory=dict)
    user_partitions: int = 0
    segments: int = 0
    segments_by_state: dict[str, int] = field(default_factory=dict)
    remote_bytes: int = 0
    partition_delete_states: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size_bytes": self.size_bytes,
            "ok": self.ok,
            "problem": self.problem,
            "format_version": self.format_version,
            "created_ms": self.created_ms,
            "partition_count": self.partition_count,
            "applied_offsets": {str(p): o for p, o in sorted(self.applied_offsets.items())},
            "user_partitions": self.user_partitions,
            "segments": self.segments,
            "segments_by_state": dict(self.segments_by_state),
            "remote_bytes": self.remote_bytes,
            "partition_delete_states": dict(self.partition_delete_states),
        }


def snapshot_files(path: Path) -> list[Path]:
    """``path`` itself if it is a file; else the snapshot files in that directory, newest
    first (names sort by sequence number)."""
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(path.glob("snapshot-*.rlmm"), reverse=True)
    raise RemoteStorageError(f"snapshot path {path} does not exist")


def inspect_snapshot(path: Path) -> SnapshotReport:
    """Decode one snapshot file and count what it holds."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return SnapshotReport(str(path), 0, False, f"unreadable: {e}")
    return inspect_snapshot_bytes(data, str(path))


def inspect_snapshot_bytes(data: bytes, source: str) -> SnapshotReport:
    """Decode one snapshot's bytes, read from ``source`` (its path or location, the
    report's ``path``), and count what it holds."""
    version = None
    if len(data) >= _HEADER.size and data[: len(MAGIC)] == MAGIC:
        version = _HEADER.unpack_from(data, 0)[1]
    try:
        snap = decode_snapshot(data, source)
    except SnapshotError as e:
        return SnapshotReport(source, len(data), False, str(e), version)
    store = RemotePartitionMetadataStore()
    try:
        store.load_state(snap.state)
        caches = list(store.caches.values())  # decodes every partition's block
    except (ValueError, TypeError, KeyError, IndexError, SnapshotBlockError) as e:
        return SnapshotReport(
            source,
            len(data),
            False,
            f"checksum ok but the state is not an rlmm manager's: {type(e).__name__}: {e}",
            version,
            snap.created_ms,
            snap.partition_count,
            dict(snap.applied_offsets),
        )
    states: Counter[str] = Counter()
    remote_bytes = 0
    for cache in caches:
        for m in cache.segments.values():
            states[m.state.name] += 1
            remote_bytes += m.segment_size_in_bytes
    deletes = Counter(d.state.name for d in store.delete_states.values())
    return SnapshotReport(
        path=source,
        size_bytes=len(data),
        ok=True,
        format_version=version,
        created_ms=snap.created_ms,
        partition_count=snap.partition_count,
        applied_offsets=dict(snap.applied_offsets),
        user_partitions=len(store.partitions()),
        segments=sum(states.values()),
        segments_by_state=dict(sorted(states.items())),
        remote_bytes=remote_bytes,
        partition_delete_states=dict(sorted(deletes.items())),
    )


def inspect_snapshots(path: Path) -> list[SnapshotReport]:
    """A report per snapshot file at ``path`` (a file, or a directory of them)."""
    return [inspect_snapshot(p) for p in snapshot_files(path)]


def inspect_store(store: SnapshotStore, *, all_owners: bool = True) -> list[SnapshotReport]:
    """A report per snapshot ``store`` keeps, valid or not, newest first: this owner's,
    then (``all_owners``, a shared store) every other owner's.

    Raises SnapshotStoreError only if the store cannot be listed.
    """
    locations = store.kept_all_owners() if all_owners else store.kept()
    reports = []
    for location in locations:
        try:
            data = store.read(location)
        except SnapshotError as e:
            reports.append(SnapshotReport(location, 0, False, f"unreadable: {e}"))
            continue
        reports.append(inspect_snapshot_bytes(data, location))
    return reports


def inspect_configured(config: RlmmConfig) -> list[SnapshotReport]:
    """A report per snapshot of ``config``'s ``[snapshot]`` store: the files of its
    directory, or the objects of its S3 store (every owner's)."""
    if config.snapshot.get("store", "local") == "local":
        # Read as files, not through the store: a missing directory is an error here
        # (a typo in snapshot.dir), where the store would list it as empty.
        return inspect_snapshots(config.snapshot_dir())
    store = open_snapshot_source(config)
    try:
        return inspect_store(store)
    finally:
        store.close()


__all__ = [
    "SnapshotReport",
    "inspect_configured",
    "inspect_snapshot",
    "inspect_snapshot_bytes",
    "inspect_snapshots",
    "inspect_store",
    "snapshot_files",
]
