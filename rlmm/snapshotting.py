"""When and where the manager snapshots its cache, and how readers find a snapshot.

The store is the configured snapshot.SnapshotStore (a local directory, or S3 shared
by every broker: ``[snapshot] store``). After each write + prune the Snapshotter
registers, on a FileEventLog, a retention claim: per metadata partition the lowest
``applied + 1`` over every snapshot this owner keeps, so the log may delete only
what each of them can do without. ``newest_snapshot`` finds, in a store the caller
opened (``rlmm.factory``'s ``open_snapshot_source``: the factory sits above this
module and builds what it reads), the published snapshot a reader (the archive view)
can start from.

Invariant: at most one snapshot write is in flight; the state handed to it is a copy
taken synchronously on the event loop (so it is consistent with the applied offsets
recorded beside it) and the encoding and I/O run off the loop. A snapshot that
cannot be read is never fatal: load() returns None and the manager replays the log.
A claim never names a floor above an offset some kept snapshot still needs: a kept
snapshot whose offsets are unknown holds every partition at 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventlog import EventLog
from eventlog.file import FileEventLog
from eventlog.registry import log_start_offsets
from rlmm.config import RlmmConfig
from snapshot import Packable, Snapshot, SnapshotError, SnapshotStore, load_snapshot_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotPolicy:
    """Where snapshots live and how often they are taken.

    ``store``: options for ``snapshot.load_snapshot_store`` (None: a local store in
    ``directory``). ``retention``: register the kept snapshots' floors on a
    FileEventLog so it can delete what none of them needs (opt-in here; on by
    default in the ``[snapshot]`` config).
    """

    directory: Path
    every_events: int = 100_000
    interval_s: float = 300.0
    keep: int = 2
    store: Mapping[str, Any] | None = field(default=None, compare=False)
    owner: str = "broker-0"
    retention: bool = False

    def __post_init__(self) -> None:
        if self.every_events < 1:
            raise ValueError(f"snapshot every_events must be >= 1, got {self.every_events}")
        if self.interval_s <= 0:
            raise ValueError(f"snapshot interval_s must be > 0, got {self.interval_s}")
        if self.keep < 1:
            raise ValueError(f"snapshot keep must be >= 1, got {self.keep}")

    def open_store(self) -> SnapshotStore:
        if self.store is None:
            return load_snapshot_store(
                {"type": "local", "directory": self.directory, "keep": self.keep}
            )
        return load_snapshot_store(self.store)


def _usable(snap: Snapshot, partition_count: int, log_starts: Mapping[int, int]) -> bool:
    """Same partitioning, and every partition replays from an offset the log still has."""
    if snap.partition_count != partition_count:
        return False
    return all(snap.applied_offsets.get(p, -1) + 1 >= start for p, start in log_starts.items())


class Snapshotter:
    """Counts applied events, runs snapshot writes one at a time, registers retention."""

    def __init__(
        self, policy: SnapshotPolicy, partition_count: int, event_log: EventLog | None = None
    ) -> None:
        self.policy = policy
        self._partition_count = partition_count
        self._store = policy.open_store()
        self._log = (
            event_log
            if policy.retention and isinstance(event_log, FileEventLog) and not event_log.read_only
            else None
        )
        self._since_last = 0
        self._last_time = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    @property
    def store(self) -> SnapshotStore:
        return self._store

    async def load(self) -> Snapshot | None:
        """This owner's newest valid snapshot, or None (rlmm.replay checks that it was
        written for the log's partitioning).

        With none of its own (a new broker, a new data dir), a shared store's newest
        valid snapshot of any owner is the starting point instead.
        """
        try:
            snap = await self._store.load_latest_async()
            if snap is None and self._store.shared:
                snap = await self.find({})
        except SnapshotError as e:
            # The store itself is unreachable (a bucket that is gone, no network): the
            # log is still the source of truth, so replay it rather than fail to start.
            log.warning("cannot read snapshots from %r, replaying the log: %s", self._store, e)
            return None
        return snap

    async def find(self, log_starts: Mapping[int, int]) -> Snapshot | None:
        """The newest valid snapshot of any owner that the log can continue from."""

        def search() -> Snapshot | None:
            for _, snap in self._store.iter_valid(all_owners=True):
                if _usable(snap, self._partition_count, log_starts):
                    return snap
            return None

        return await asyncio.to_thread(search)

    def note_applied(self, count: int) -> bool:
        """Count applied events; True when a snapshot is due."""
        self._since_last += count
        return (
            self._since_last >= self.policy.every_events
            or time.monotonic() - self._last_time >= self.policy.interval_s
        )

    def schedule(self, take: Callable[[], Awaitable[None]]) -> None:
        if self._task is None or self._task.done():
            self._since_last = 0
            self._last_time = time.monotonic()
            self._task = asyncio.ensure_future(take())

    async def wait_idle(self) -> None:
        if self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def write(self, applied: dict[int, int], state: Packable) -> str:
        snap = Snapshot(
            partition_count=self._partition_count,
            applied_offsets=applied,
            state=state,
            created_ms=int(time.time() * 1000),
        )
        location = str(await self._store.write_async(snap))
        if self._log is not None:
            await self._register(location, applied)
        return location

    async def _register(self, location: str, applied: Mapping[int, int]) -> None:
        """Claim, for this owner, the floors that every kept snapshot allows."""
        assert self._log is not None
        claims = await self._log.retention_claims()
        previous = claims.claims.get(self.policy.owner)
        known: dict[str, dict[int, int]] = {}
        if previous is not None and isinstance(previous.start_from, dict):
            for entry in previous.start_from.get("snapshots", []):
                try:
                    known[str(entry["location"])] = {
                        int(p): int(o) for p, o in entry["applied"].items()
                    }
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue  # an entry we cannot read is simply unknown
        known[location] = dict(applied)
        kept = await asyncio.to_thread(self._store.kept)
        floors: dict[int, int] = {}
        if all(loc in known for loc in kept):
            for p in range(self._partition_count):
                floor = min((known[loc].get(p, -1) + 1 for loc in kept), default=0)
                if floor > 0:
                    floors[p] = floor
        else:
            # A kept snapshot we know nothing about (written before retention existed,
            # or by another store): it may need the whole log until it is pruned.
            log.info("a kept snapshot's offsets are unknown: retention holds the whole log")
        start_from = {
            "store": repr(self._store),
            "snapshots": [
                {"location": loc, "applied": {str(p): o for p, o in known[loc].items()}}
                for loc in kept
                if loc in known
            ],
        }
        await self._log.register_retention(self.policy.owner, floors, start_from)

    def close(self) -> None:
        self._store.close()


@dataclass(frozen=True)
class PublishedSnapshot:
    """A valid snapshot and where it was found."""

    location: str
    snapshot: Snapshot


def newest_snapshot(
    config: RlmmConfig,
    store: SnapshotStore,
    partitions: Collection[int] | None = None,
    *,
    log_starts: Mapping[int, int] | None = None,
) -> PublishedSnapshot | None:
    """The newest valid published snapshot (any owner) that covers ``partitions``.

    Covering means: the snapshot has an applied offset for every partition asked for
    (all of the log's when None), and each of them replays from an offset the event
    log still holds (``log_starts``; read from a file log's directory when not given).
    A reader loads its state and replays each partition from ``applied + 1``. None if
    no snapshot qualifies (replay from the log start, or combine several owners').
    Blocking (object storage and file I/O): call it from a worker thread in async code.
    """
    count = int(config.eventlog["partitions"])
    wanted = range(count) if partitions is None else partitions
    if log_starts is None:
        log_starts = log_start_offsets(config.event_log_options())
    needed = {p: start for p, start in log_starts.items() if p in wanted}
    for location, snap in store.iter_valid(all_owners=True):
        if not all(p in snap.applied_offsets for p in wanted):
            continue
        if _usable(snap, count, needed):
            return PublishedSnapshot(location, snap)
    return None
