"""The SnapshotStore ABC: where one owner's snapshots are kept, and what every store shares.

This is the snapshot store's base module: every backend (``local``, ``s3``) subclasses
it, and it imports none of them (``snapshot.registry`` names them).

Invariant: every backend keeps, per owner, the newest ``keep`` valid snapshots, never
deletes the newest valid one, and ``load_latest`` skips (with a warning, counted in
``stats``) anything it cannot decode instead of raising.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from snapshot.errors import SnapshotCorruptError, SnapshotVersionError
from snapshot.format import Snapshot, decode_snapshot

SUBPREFIX = "__snapshots"
"""The folder, under a remote store's root or prefix, where a snapshot store that
shares it with the segments keeps its snapshots (the S3 backend): no topic's folder
(``<topic>-<topic id>``) can take this name."""


@dataclass
class SnapshotStoreStats:
    """Counters since the store was opened (for metrics and tests)."""

    written: int = 0
    loaded: int = 0
    skipped_corrupt: int = 0
    skipped_newer_version: int = 0
    skipped_unreadable: int = 0
    pruned: int = 0
    temp_removed: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class SnapshotStore(ABC):
    """Where one owner's snapshots are kept (newest ``keep`` valid ones).

    ``SnapshotStore(directory, keep=..., read_only=...)`` still builds a
    LocalSnapshotStore, as it did before the store became pluggable.
    """

    keep: int
    read_only: bool
    stats: SnapshotStoreStats
    # True if other owners publish into the same store (iter_valid(all_owners=True)).
    shared: bool = False

    def __new__(cls, *args: object, **kwargs: object) -> SnapshotStore:
        if cls is SnapshotStore:
            # Callers from before the ABC existed construct the directory store by this name.
            # (type.__call__ then runs LocalSnapshotStore.__init__ on it, once.)
            from snapshot.registry import backend

            cls = backend("local")
        return super().__new__(cls)

    @abstractmethod
    def write(self, snapshot: Snapshot) -> str | Path:
        """Durably store ``snapshot`` as this owner's newest, prune, return where it went."""

    @abstractmethod
    def load_latest(self) -> Snapshot | None:
        """This owner's newest valid snapshot, or None (the caller replays fully)."""

    @abstractmethod
    def kept(self) -> list[str]:
        """Locations of this owner's stored snapshots, newest first (valid or not)."""

    @abstractmethod
    def iter_valid(self, *, all_owners: bool = False) -> Iterator[tuple[str, Snapshot]]:
        """``(location, snapshot)`` of valid snapshots, newest first, bad ones skipped.

        ``all_owners``: also those published by other owners sharing the store (a
        store that has no other owners yields its own).
        """

    def kept_all_owners(self) -> list[str]:
        """``kept()`` of every owner publishing into this store: this owner's first,
        then the others' by owner name, each newest first (valid or not).

        The default is ``kept()``: right for a store no other owner shares.
        """
        return self.kept()

    def read(self, location: str) -> bytes:
        """The raw bytes of the stored snapshot at ``location`` (one that ``kept()``,
        ``kept_all_owners()`` or ``iter_valid`` named), not checked: for tools that
        report on a damaged snapshot rather than skip it.

        Raises SnapshotStoreError if it cannot be read (gone, or not this store's).
        A backend that predates this method cannot: NotImplementedError says which.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot read a snapshot by its location")

    def _decode_or_skip(self, data: bytes, source: str, log: logging.Logger) -> Snapshot | None:
        """The snapshot in ``data``, or None after logging and counting why it is unusable."""
        try:
            snapshot = decode_snapshot(data, source)
        except SnapshotVersionError as exc:
            self.stats.skipped_newer_version += 1
            log.warning(
                "skipping snapshot %s: format version %d is newer than %d "
                "(written by a newer rlmm)",
                source,
                exc.version,
                exc.supported,
            )
            return None
        except SnapshotCorruptError as exc:
            self.stats.skipped_corrupt += 1
            log.warning("skipping corrupt snapshot %s: %s", source, exc.reason)
            return None
        self.stats.loaded += 1
        log.info("loaded snapshot %s", source)
        return snapshot

    def close(self) -> None:  # noqa: B027 - only stores holding connections need it
        """Release resources; idempotent."""

    async def write_async(self, snapshot: Snapshot) -> str | Path:
        """``write`` on a worker thread; the caller must pass a state it no longer mutates.

        If the awaiting task is cancelled the thread still completes the write (it is
        atomic either way).
        """
        return await asyncio.to_thread(self.write, snapshot)

    async def load_latest_async(self) -> Snapshot | None:
        """``load_latest`` on a worker thread (decoding a large snapshot takes a while)."""
        return await asyncio.to_thread(self.load_latest)


__all__ = ["SUBPREFIX", "SnapshotStore", "SnapshotStoreStats"]
