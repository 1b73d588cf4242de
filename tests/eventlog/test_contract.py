"""The EventLog contract: every backend (memory, file, kafka) must pass all of it.

Invariant: these tests use only the public EventLog API and the package's errors, so a
new backend is correct when it passes them unchanged.
"""

from __future__ import annotations

import asyncio

import pytest

from eventlog import EventLogClosedError, UnknownPartitionError
from eventlog.errors import InvalidOffsetError, InvalidRecordError
from tests.eventlog.conftest import MakeLog, aclose, collect


async def test_offsets_are_dense_from_zero_per_partition(make_log: MakeLog) -> None:
    log = await make_log(partitions=3)
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for i in range(10):
        p = i % 2  # partition 2 stays empty
        got[p].append(await log.append(p, f"v{i}".encode()))
    assert got == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4], 2: []}
    assert await log.end_offsets([0, 1, 2]) == {0: 5, 1: 5, 2: 0}


async def test_concurrent_appends_get_distinct_dense_offsets(make_log: MakeLog) -> None:
    log = await make_log(partitions=2)
    values = [f"value-{i}".encode() for i in range(64)]
    offsets = await asyncio.gather(*(log.append(1, v) for v in values))
    assert sorted(offsets) == list(range(64))
    by_offset = dict(await collect(log, 1, 0, 64))
    assert all(by_offset[o] == v for o, v in zip(offsets, values, strict=True))


async def test_append_batch_keeps_order(make_log: MakeLog) -> None:
    log = await make_log()
    assert await log.append(0, b"first") == 0
    values = [f"batch-{i}".encode() for i in range(20)]
    assert await log.append_batch(0, values) == list(range(1, 21))
    assert await log.append_batch(0, []) == []
    assert await collect(log, 0, 0, 21) == [(0, b"first"), *enumerate(values, start=1)]
    assert await log.end_offsets([0]) == {0: 21}


async def test_end_offsets_is_the_next_offset(make_log: MakeLog) -> None:
    log = await make_log(partitions=2)
    assert await log.end_offsets([0, 1]) == {0: 0, 1: 0}
    await log.append_batch(1, [b"a", b"b", b"c"])
    assert await log.end_offsets([1]) == {1: 3}
    assert await log.append(1, b"d") == 3
    assert await log.end_offsets(iter([0, 1])) == {0: 0, 1: 4}


async def test_read_from_the_middle(make_log: MakeLog) -> None:
    log = await make_log()
    await log.append_batch(2, [f"r{i}".encode() for i in range(50)])
    assert await collect(log, 2, 37, 13) == [(i, f"r{i}".encode()) for i in range(37, 50)]


async def test_read_batches_yields_non_empty_lists_in_order(make_log: MakeLog) -> None:
    log = await make_log()
    for i in range(5):
        await log.append_batch(0, [f"{i}-{j}".encode() for j in range(4)])
    seen: list[int] = []
    batches = log.read_batches(0, 3)
    try:
        async with asyncio.timeout(20):
            async for batch in batches:
                assert batch, "read_batches yielded an empty list"
                seen.extend(offset for offset, _ in batch)
                if seen[-1] == 19:
                    break
    finally:
        await aclose(batches)
    assert seen == list(range(3, 20))


async def test_read_follows_live_appends(make_log: MakeLog) -> None:
    log = await make_log()
    await log.append(1, b"backlog")
    reader = asyncio.create_task(collect(log, 1, 0, 4))
    await asyncio.sleep(0.05)  # let the reader drain the backlog and wait
    assert not reader.done()
    await log.append(1, b"live-1")
    await log.append_batch(1, [b"live-2", b"live-3"])
    assert await reader == [(0, b"backlog"), (1, b"live-1"), (2, b"live-2"), (3, b"live-3")]


async def test_many_readers_see_the_same_sequence(make_log: MakeLog) -> None:
    log = await make_log()
    await log.append_batch(0, [b"x0", b"x1"])
    readers = [asyncio.create_task(collect(log, 0, start, 12 - start)) for start in (0, 0, 5)]
    await asyncio.sleep(0.05)
    for i in range(2, 12):
        await log.append(0, f"x{i}".encode())
    expected = [(i, f"x{i}".encode()) for i in range(12)]
    assert await asyncio.gather(*readers) == [expected, expected, expected[5:]]


async def test_keys_are_accepted(make_log: MakeLog) -> None:
    log = await make_log()
    assert await log.append(0, b"with-key", key=b"k1") == 0
    assert await log.append(0, b"without-key") == 1
    assert await log.append(0, b"bytearray-key", key=bytearray(b"k2")) == 2  # type: ignore[arg-type]
    assert [v for _, v in await collect(log, 0, 0, 3)] == [
        b"with-key",
        b"without-key",
        b"bytearray-key",
    ]


async def test_close_ends_pending_readers(make_log: MakeLog) -> None:
    log = await make_log()
    await log.append(0, b"only")
    seen: list[tuple[int, bytes]] = []

    async def follow() -> None:
        async for record in log.read(0):
            seen.append(record)

    reader = asyncio.create_task(follow())
    # Pending = caught up and waiting for more (a real broker's first fetch may take
    # longer than any fixed sleep on a busy machine).
    async with asyncio.timeout(20):
        while not seen:
            await asyncio.sleep(0.01)
    await log.close()
    await asyncio.wait_for(reader, 20)  # ends by itself, no cancellation
    assert seen == [(0, b"only")]
    await log.close()  # idempotent


async def test_unknown_partition_is_rejected(make_log: MakeLog) -> None:
    log = await make_log(partitions=2)
    for bad in (-1, 2, 99):
        with pytest.raises(UnknownPartitionError, match=str(bad)):
            await log.append(bad, b"v")
        with pytest.raises(UnknownPartitionError):
            await log.append_batch(bad, [b"v"])
        with pytest.raises(UnknownPartitionError):
            await log.end_offsets([0, bad])
        with pytest.raises(UnknownPartitionError):
            await collect(log, bad, 0, 1)
    assert log.partition_count == 2


async def test_bad_arguments_raise_typed_errors_and_write_nothing(make_log: MakeLog) -> None:
    log = await make_log()
    with pytest.raises(InvalidRecordError):
        await log.append(0, "text is not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError):
        await log.append(0, b"v", key=17)  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError):
        await log.append_batch(0, [b"ok", None])  # type: ignore[list-item]
    with pytest.raises(InvalidRecordError):
        await log.append_batch(0, b"a lone bytes value")  # type: ignore[arg-type]
    with pytest.raises(InvalidOffsetError):
        await collect(log, 0, -1, 1)
    assert await log.end_offsets([0]) == {0: 0}


async def test_append_after_close_raises(make_log: MakeLog) -> None:
    log = await make_log()
    await log.append(0, b"before")
    await log.close()
    with pytest.raises(EventLogClosedError):
        await log.append(0, b"after")
    with pytest.raises(EventLogClosedError):
        await log.append_batch(0, [b"after"])


async def test_reopen_keeps_data(make_log: MakeLog, backend: str) -> None:
    if backend == "memory":
        pytest.skip("MemoryEventLog is not durable: nothing survives a reopen by design")
    log = await make_log(partitions=2)
    await log.append_batch(0, [b"a", b"b"])
    await log.append(1, b"c", key=b"k")
    await log.close()
    reopened = await make_log(partitions=2)
    assert await reopened.end_offsets([0, 1]) == {0: 2, 1: 1}
    assert await collect(reopened, 0, 0, 2) == [(0, b"a"), (1, b"b")]
    assert await reopened.append(1, b"d") == 1
    assert await collect(reopened, 1, 0, 2) == [(0, b"c"), (1, b"d")]


async def test_large_values_round_trip(make_log: MakeLog, backend: str) -> None:
    log = await make_log()
    # Kafka's default max.message.bytes (1 MiB + 12) caps a whole batch, header
    # included, so the kafka backend gets a value just under it.
    size = 1_000_000 if backend.startswith("kafka") else 1 << 20
    big = [bytes([i]) * size for i in range(3)]
    offsets = [await log.append(0, value) for value in big]
    assert offsets == [0, 1, 2]
    assert await collect(log, 0, 0, 3) == list(enumerate(big))
