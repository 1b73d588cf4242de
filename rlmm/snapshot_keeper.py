"""The manager's snapshots of its cache: restored at start, taken on the policy's
schedule, on demand and at close, and a metadata partition restarted from one when
retention deleted the offsets it would replay next.

Invariants: without a policy (no Snapshotter) every method is a no-op (a restore
finds nothing); a snapshot is taken only of partitions with something applied (one
with nothing replays from 0); a failed snapshot write costs replay time, never
correctness: it is counted, noted and logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from eventlog import OffsetBeforeLogStartError
from rlmm.manager_stats import ManagerStats
from rlmm.replay import MetadataReplay
from rlmm.snapshotting import Snapshotter

# The manager's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.manager")


class SnapshotKeeper:
    """Snapshots of the replay's state, through the manager's Snapshotter (if any)."""

    def __init__(
        self, snapshotter: Snapshotter | None, replay: MetadataReplay, stats: ManagerStats
    ) -> None:
        self._snapshotter = snapshotter
        self._replay = replay
        self._stats = stats

    async def restore_while(self, starting: Awaitable[None]) -> None:
        """Await ``starting`` (the event log's start), restoring the newest valid snapshot
        meanwhile; ``starting``'s error is the one raised."""
        # Reading the snapshot and recovering the log are independent I/O: overlap them.
        loading = (
            asyncio.ensure_future(self._snapshotter.load())
            if self._snapshotter is not None
            else None
        )
        try:
            await starting
        except BaseException:
            if loading is not None:
                loading.cancel()
                await asyncio.wait([loading])
                if not loading.cancelled():
                    loading.exception()  # retrieved: the log's error is the one to raise
            raise
        if self._snapshotter is not None and loading is not None:
            snap = await loading
            if snap is not None:
                # Lazy restore: this only indexes each user partition's encoded block;
                # a block is decoded on the partition's first use (metadata_store).
                source = (
                    f"the snapshot in {self._snapshotter.policy.directory} restored at start"
                    f" (applied offsets {dict(sorted(snap.applied_offsets.items()))})"
                )
                self._replay.restore(snap, source)

    def note_applied(self, count: int) -> None:
        """``count`` more events applied: take a snapshot (in the background) if one is due."""
        if self._snapshotter is not None and self._snapshotter.note_applied(count):
            self._snapshotter.schedule(self.take)

    async def take(self) -> None:
        """Snapshot the replay's state now."""
        taken = None if self._snapshotter is None else self._replay.snapshot_state()
        if self._snapshotter is None or taken is None:
            return  # no snapshots, or nothing applied yet (every partition replays from 0)
        applied, state = taken
        try:
            await self._snapshotter.write(applied, state)
            self._stats.snapshots_written += 1
        except Exception as e:  # a failed snapshot costs replay time, never correctness
            self._stats.snapshot_failures += 1
            self._stats.note(f"snapshot failed: {e!r}")
            log.warning("writing a snapshot failed: %r", e)

    async def take_last(self, started: bool) -> None:
        """At close: wait for the snapshot in flight, take a last one (if the manager
        ``started``), and release the Snapshotter."""
        if self._snapshotter is not None and started:
            await self._snapshotter.wait_idle()
            await self.take()
        if self._snapshotter is not None:
            self._snapshotter.close()

    async def restore_partition(self, p: int, error: OffsetBeforeLogStartError) -> bool:
        """Restart metadata partition ``p`` from a snapshot the log can continue from.

        Retention deleted the offsets ``p`` would replay next: the partition's state is
        replaced by a published snapshot's (its applied offset is at or past the log
        start) and the tail is replayed from there. False if no snapshot qualifies.
        """
        if self._snapshotter is None:
            return False
        snap = await self._snapshotter.find({p: error.log_start})
        if snap is None:
            return False
        self._replay.adopt(p, snap)
        self._stats.partitions_restored += 1
        log.warning(
            "metadata partition %d: the log starts at %d (retention), restarted from a"
            " snapshot at offset %d",
            p,
            error.log_start,
            snap.applied_offsets[p],
        )
        return True
