"""When and how the manager snapshots its cache (policy over snapshot.SnapshotStore).

Invariant: at most one snapshot write is in flight; the state handed to it is a copy
taken synchronously on the event loop (so it is consistent with the applied offsets
recorded beside it) and the encoding and file I/O run off the loop. A snapshot that
cannot be read is never fatal: load() returns None and the manager replays the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapshot import Snapshot, SnapshotStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotPolicy:
    """Where snapshots live and how often they are taken."""

    directory: Path
    every_events: int = 100_000
    interval_s: float = 300.0
    keep: int = 2

    def __post_init__(self) -> None:
        if self.every_events < 1:
            raise ValueError(f"snapshot every_events must be >= 1, got {self.every_events}")
        if self.interval_s <= 0:
            raise ValueError(f"snapshot interval_s must be > 0, got {self.interval_s}")
        if self.keep < 1:
            raise ValueError(f"snapshot keep must be >= 1, got {self.keep}")


class Snapshotter:
    """Counts applied events and runs snapshot writes one at a time."""

    def __init__(self, policy: SnapshotPolicy, partition_count: int) -> None:
        self.policy = policy
        self._partition_count = partition_count
        self._store = SnapshotStore(policy.directory, keep=policy.keep)
        self._since_last = 0
        self._last_time = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> tuple[dict[int, int], Any] | None:
        """(applied offsets, state) of the newest valid snapshot, or None."""
        snap = await asyncio.to_thread(self._store.load_latest)
        if snap is None:
            return None
        if snap.partition_count != self._partition_count:
            log.warning(
                "ignoring snapshot for %d metadata partitions (the log has %d): full replay",
                snap.partition_count,
                self._partition_count,
            )
            return None
        return dict(snap.applied_offsets), snap.state

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

    async def write(self, applied: dict[int, int], state: Any) -> Path:
        snap = Snapshot(
            partition_count=self._partition_count,
            applied_offsets=applied,
            state=state,
            created_ms=int(time.time() * 1000),
        )
        return await self._store.write_async(snap)
