"""MemoryEventLog: a real, single-process event log held in lists (tests, demos).

Invariant: partition ``p``'s record at offset ``o`` is ``self._records[p][o]``; offsets
are list indexes, so they are dense from 0 by construction. Readers replay a slice and
then wait on a future the next append completes (no polling). Nothing survives the
process: a reopened MemoryEventLog is empty.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

from eventlog._notify import Notifier
from eventlog._records import check_key, check_offset, check_values, to_bytes
from eventlog.errors import EventLogClosedError, EventLogConfigError
from eventlog.log import EventLog

# Records per yielded list: bounds a replaying reader's burst like a fetch size would.
_MAX_BATCH_RECORDS = 1000


class MemoryEventLog(EventLog):
    """A partitioned log in memory; behaves like the durable backends except durability."""

    def __init__(self, partitions: int) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions <= 0:
            raise EventLogConfigError(f"partitions must be an int > 0, got {partitions!r}")
        self._records: list[list[bytes]] = [[] for _ in range(partitions)]
        self._notifiers = [Notifier() for _ in range(partitions)]
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"MemoryEventLog(partitions={len(self._records)}, {state})"

    @property
    def partition_count(self) -> int:
        return len(self._records)

    def _check_open(self, partition: int) -> None:
        if self._closed:
            raise EventLogClosedError(f"{self!r}: partition {partition} is unavailable")

    async def append(self, partition: int, value: bytes, key: bytes | None = None) -> int:
        self._check_partition(partition)
        record = to_bytes(value, "value", partition)
        # Keys are checked (bad input fails the same way everywhere) but not kept:
        # readers only ever see values.
        check_key(key, partition)
        self._check_open(partition)
        self._records[partition].append(record)
        self._notifiers[partition].notify_all()
        return len(self._records[partition]) - 1

    async def append_batch(self, partition: int, values: Sequence[bytes]) -> list[int]:
        self._check_partition(partition)
        records = check_values(values, partition)
        self._check_open(partition)
        log = self._records[partition]
        first = len(log)
        log.extend(records)
        if records:
            self._notifiers[partition].notify_all()
        return list(range(first, len(log)))

    async def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        wanted = list(partitions)
        for p in wanted:
            self._check_partition(p)
            self._check_open(p)
        return {p: len(self._records[p]) for p in wanted}

    async def read_batches(
        self, partition: int, start_offset: int = 0
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        self._check_partition(partition)
        offset = check_offset(start_offset, partition)
        self._check_open(partition)
        log = self._records[partition]
        while not self._closed:
            if offset < len(log):
                end = min(len(log), offset + _MAX_BATCH_RECORDS)
                batch = [(o, log[o]) for o in range(offset, end)]
                offset = end
                yield batch
            else:
                await self._notifiers[partition].wait()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for notifier in self._notifiers:
            notifier.notify_all()
