"""Test helpers for the manager: a gate in front of a real log's reads, and replays."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

from eventlog import EventLog
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.codec import decode
from rlmm.errors import RemoteStorageError


class GatedEventLog(EventLog):
    """A real log whose readers wait for ``gate`` before delivering anything.

    Lets tests hold a manager in the assigned-but-not-ready state, or hold its apply
    loop while writes are in flight, without timing games.
    """

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.gate = asyncio.Event()

    @property
    def partition_count(self) -> int:
        return self.inner.partition_count

    async def start(self) -> None:
        await self.inner.start()

    async def append(self, partition: int, value: bytes, key: bytes | None = None) -> int:
        return await self.inner.append(partition, value, key)

    async def append_batch(self, partition: int, values: Sequence[bytes]) -> list[int]:
        return await self.inner.append_batch(partition, values)

    async def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        return await self.inner.end_offsets(partitions)

    async def read_batches(
        self, partition: int, start_offset: int = 0
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        await self.gate.wait()
        async for batch in self.inner.read_batches(partition, start_offset):
            yield batch

    async def close(self) -> None:
        await self.inner.close()


async def read_all(log: EventLog, partition: int) -> list[tuple[int, bytes]]:
    """Every record of ``partition`` up to its current end offset."""
    end = (await log.end_offsets([partition]))[partition]
    out: list[tuple[int, bytes]] = []
    if end == 0:
        return out
    async for batch in log.read_batches(partition, 0):
        out.extend(r for r in batch if r[0] < end)
        if out and out[-1][0] >= end - 1:
            break
    return out


async def sequential_replay(
    log: EventLog, partitions: Iterable[int] | None = None
) -> RemotePartitionMetadataStore:
    """A fresh store fed every event of the log in offset order, one partition at a time."""
    store = RemotePartitionMetadataStore()
    for p in partitions if partitions is not None else range(log.partition_count):
        for _offset, value in await read_all(log, p):
            # skipped when illegal, exactly as the manager's apply loop skips it
            with contextlib.suppress(RemoteStorageError):
                store.apply(decode(value))
    return store
