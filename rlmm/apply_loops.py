"""The apply loops: one task per metadata partition reads its records from the event
log, from the offset after the last applied, and applies them through the replay.

Invariants: a loop never dies of a read error (it logs, backs off and resumes); it
ends only when cancelled or when its log is closed; after each applied batch the
partition's waiters are woken and the snapshot schedule is told; a partition Kafka
refuses to let us read is in ``denied`` with the reason, its waiters failed with it,
until a batch is read again; a loop restarted by ``replay_from_log`` applies nothing
after its partition's reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from eventlog import EventLog, EventLogClosedError, OffsetBeforeLogStartError
from eventlog.errors import EventLogAuthError
from rlmm.applied_waits import AppliedWaits
from rlmm.errors import RemoteStorageNotReadyError, SnapshotBlockError
from rlmm.manager_stats import ManagerStats
from rlmm.offload_metadata import AUTH_RETRY_S
from rlmm.replay import MetadataReplay
from rlmm.snapshot_keeper import SnapshotKeeper

# The manager's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.manager")


class ApplyLoops:
    """The running apply loops by metadata partition (``tasks``), and why Kafka refuses
    to let us read any of them (``denied``)."""

    def __init__(
        self,
        event_log: EventLog,
        replay: MetadataReplay,
        stats: ManagerStats,
        waits: AppliedWaits,
        snapshots: SnapshotKeeper,
    ) -> None:
        self._log = event_log
        self._replay = replay
        self._applied = replay.applied
        self._stats = stats
        self._waits = waits
        self._snapshots = snapshots
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # metadata partition -> why Kafka refuses to let us read it (an ACL, a credential)
        self.denied: dict[int, str] = {}

    def start(self, p: int) -> None:
        """Start applying metadata partition ``p`` (from offset 0 if nothing is applied)."""
        self._applied.setdefault(p, -1)
        self.tasks[p] = asyncio.create_task(self._consume(p), name=f"rlmm-apply-{p}")

    async def stop(self, p: int) -> None:
        """Stop the loop of ``p`` and wait until it ended."""
        task = self.tasks.pop(p)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop_all(self) -> None:
        """Stop every loop and wait until they all ended."""
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def replay_from_log(self, p: int, error: SnapshotBlockError) -> None:
        """:meth:`_reset` from outside the apply loop: restart its consumer.

        Runs synchronously in a caller's task while the consumer task of ``p`` waits at
        an await, so the old consumer applies nothing after the reset.
        """
        old = self.tasks.pop(p, None)
        if old is not None:
            old.cancel()
        self._reset(p, error)
        if old is not None:
            self.tasks[p] = asyncio.create_task(self._consume_after(old, p), name=f"rlmm-apply-{p}")

    def _reset(self, p: int, error: SnapshotBlockError) -> None:
        """Drop metadata partition ``p``'s restored state: it is replayed from offset 0."""
        self._stats.note(str(error))
        self._replay.reset(p, error)

    async def _consume_after(self, old: asyncio.Task[None], p: int) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await old
        await self._consume(p)

    async def _consume(self, p: int) -> None:
        backoff = 0.05
        while True:
            start = self._applied.get(p, -1) + 1
            batches = self._log.read_batches(p, start)
            try:
                async for batch in batches:
                    try:
                        self._apply_batch(p, batch)
                    except SnapshotBlockError as e:
                        self._reset(p, e)
                        break  # read again from offset 0
                    backoff = 0.05
                    self.denied.pop(p, None)
                else:
                    return  # the log was closed
                continue
            except asyncio.CancelledError:
                raise
            except EventLogClosedError:
                return  # closed under us (its owner closed it): it does not come back
            except Exception as e:  # the loop never dies: log, back off, resume
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # A client turned our cancellation into its own error.
                    raise asyncio.CancelledError() from e
                if isinstance(e, OffsetBeforeLogStartError) and await self._restore(p, e):
                    continue
                self._stats.read_errors += 1
                self._stats.note(f"read of metadata partition {p} from {start}: {e!r}")
                if isinstance(e, EventLogAuthError):
                    # Fail closed: the partitions stay not ready, saying why; retried
                    # slowly (an operator may grant the ACL), logged once per reason.
                    if self.denied.get(p) != str(e):
                        log.error("metadata partition %d cannot be read: %s", p, e)
                    self.denied[p] = str(e)
                    # whoever waits on this partition learns why now, not at a timeout
                    self._waits.fail(p, RemoteStorageNotReadyError(message=str(e)))
                    await asyncio.sleep(AUTH_RETRY_S)
                    continue
                log.warning("reading metadata partition %d from offset %d failed: %r", p, start, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                aclose = getattr(batches, "aclose", None)
                if aclose is not None:
                    await aclose()

    def _apply_batch(self, p: int, batch: list[tuple[int, bytes]]) -> None:
        self._replay.apply_batch(p, batch)
        self._waits.wake(p)
        self._snapshots.note_applied(len(batch))

    async def _restore(self, p: int, error: OffsetBeforeLogStartError) -> bool:
        """Retention deleted what ``p`` would read next: restart it from a snapshot (if
        one qualifies), its waiters woken at the snapshot's offset."""
        if not await self._snapshots.restore_partition(p, error):
            return False
        self._waits.wake(p)
        return True
