"""What a writer (or a reader waiting to be ready) waits for: an offset of a metadata
partition applied, and whether the record published there was rejected.

Invariants: a wait is a future completed by the apply loop (``wake``) once the
partition's applied offset reaches its offset, never polled; each partition's waits
are a heap by offset, so a wake pops only the waits it satisfies; a failed partition's
waits leave it all at once. ``moved`` is done at the first wake after it was asked
for (whoever follows the applied offsets as they move waits on it, never polls). The
replay's rejection of the record at (partition, offset) is remembered until its writer
takes it, the newest ``_MAX_REMEMBERED_REJECTIONS`` at most (a writer that gave up
never takes its own).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import OrderedDict

from rlmm.errors import RemoteStorageError
from rlmm.manager_stats import ManagerStats

_MAX_REMEMBERED_REJECTIONS = 10_000


class AppliedWaits:
    """The futures waiting for offsets of the metadata partitions to be applied."""

    def __init__(self, applied: dict[int, int]) -> None:
        """``applied``: the replay's offsets applied per metadata partition (read, never
        written)."""
        self._applied = applied
        self._waiters: dict[int, list[tuple[int, int, asyncio.Future[None]]]] = {}
        # ties broken by arrival: futures are not comparable
        self._seq = itertools.count()
        self._moved: asyncio.Future[None] | None = None

    def wait(self, p: int, offset: int) -> asyncio.Future[None]:
        """Done once metadata partition ``p`` has applied ``offset``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._applied.get(p, -1) >= offset:
            fut.set_result(None)
        else:
            heapq.heappush(self._waiters.setdefault(p, []), (offset, next(self._seq), fut))
        return fut

    def moved(self) -> asyncio.Future[None]:
        """Done at the next wake of any partition (one future shared by every caller:
        shield it before a wait that may be cancelled)."""
        if self._moved is None or self._moved.done():
            self._moved = asyncio.get_running_loop().create_future()
        return self._moved

    def wake(self, p: int) -> None:
        """Complete the waits of ``p`` that its applied offset now reaches."""
        moved = self._moved
        if moved is not None and not moved.done():
            moved.set_result(None)
        heap = self._waiters.get(p)
        applied = self._applied.get(p, -1)
        while heap and heap[0][0] <= applied:
            fut = heapq.heappop(heap)[2]
            if not fut.done():
                fut.set_result(None)

    def fail(self, p: int | None, error: Exception) -> None:
        """Fail every wait of ``p`` (None: of every partition) with ``error``."""
        for key in [p] if p is not None else list(self._waiters):
            for _, _, fut in self._waiters.pop(key, []):
                if not fut.done():
                    fut.set_exception(error)


class Rejections:
    """Why the replay skipped a record, by (metadata partition, offset), for its writer."""

    def __init__(self, stats: ManagerStats) -> None:
        self._stats = stats
        self._rejections: OrderedDict[tuple[int, int], RemoteStorageError] = OrderedDict()

    def remember(self, p: int, offset: int, error: RemoteStorageError, message: str) -> None:
        """The replay skipped this record: its writer (if it waits) fails with ``error``."""
        self._stats.note(message)
        self._rejections[(p, offset)] = error
        if len(self._rejections) > _MAX_REMEMBERED_REJECTIONS:
            self._rejections.popitem(last=False)

    def take(self, p: int, offset: int) -> RemoteStorageError | None:
        """The rejection of the record at ``offset`` of ``p`` (forgotten now), if any."""
        return self._rejections.pop((p, offset), None)
