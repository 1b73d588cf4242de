"""KafkaEventLog against a real Kafka-protocol broker (Tansu, or RLMM_KAFKA_BOOTSTRAP).

Invariant checked: the Kafka backend keeps the EventLog contract on a real broker
(dense offsets from acks, ordered replay then live follow, HW-based end offsets)
and the bytes on the topic are exactly the appended ones for any Kafka client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from eventlog.errors import (
    EventLogClosedError,
    EventLogConfigError,
    EventLogRecordTooLargeError,
    InvalidOffsetError,
    InvalidRecordError,
    UnknownPartitionError,
)
from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from tests.fixtures.kafka import BrokerStartError, TansuBroker

pytestmark = pytest.mark.kafka


def new_topic() -> str:
    return f"rlmm-test-{uuid4().hex[:8]}"


def make_log(bootstrap: str, partitions: int = 3, **settings: Any) -> KafkaEventLog:
    settings.setdefault("topic", new_topic())
    settings.setdefault("replication_factor", 1)
    return KafkaEventLog(bootstrap, partitions, KafkaLogSettings(**settings))


@pytest.fixture
async def klog(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = make_log(kafka_bootstrap)
    await log.start()
    try:
        yield log
    finally:
        await log.close()


async def take(log: KafkaEventLog, partition: int, start: int, n: int) -> list[tuple[int, bytes]]:
    """The first ``n`` records of ``read(partition, start)`` (bounded wait)."""
    out: list[tuple[int, bytes]] = []

    async def run() -> None:
        async for record in log.read(partition, start):
            out.append(record)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), timeout=15)
    return out


async def test_start_creates_topic_with_partitions_and_configs(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap, partitions=4)
    async with log:
        assert log.topic_created
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            [described] = await admin.describe_topics([log.topic])
            assert len(described["partitions"]) == 4
            # Tansu answers DescribeConfigs with the configs given at creation.
            [response] = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, log.topic)]
            )
            entries = {e[0]: e[1] for e in response.resources[0][4]}
        finally:
            await admin.close()
        assert entries["retention.ms"] == "-1"
        assert entries["cleanup.policy"] == "delete"
    # A second instance finds the topic and does not create it again.
    again = make_log(kafka_bootstrap, partitions=4, topic=log.topic)
    async with again:
        assert not again.topic_created


async def test_partition_count_mismatch_is_refused(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap, partitions=3)
    async with log:
        pass
    other = make_log(kafka_bootstrap, partitions=5, topic=log.topic)
    with pytest.raises(EventLogConfigError) as info:
        await other.start()
    message = str(info.value)
    assert log.topic in message and "3 partitions" in message and "expected 5" in message
    await other.close()


async def test_missing_topic_without_create_is_refused(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap, create_topic=False)
    with pytest.raises(EventLogConfigError, match=log.topic):
        await log.start()
    await log.close()


async def test_append_batch_read_and_end_offsets(klog: KafkaEventLog) -> None:
    assert await klog.end_offsets([0, 1, 2]) == {0: 0, 1: 0, 2: 0}
    assert await klog.append(0, b"a") == 0
    assert await klog.append_batch(0, [b"b", b"c", b"d"]) == [1, 2, 3]
    assert await klog.append(0, b"e", key=b"k") == 4
    assert await klog.append_batch(1, [b"x"]) == [0]
    assert await klog.append_batch(2, []) == []
    # The high watermark is right where Tansu's ListOffsets(latest) is not.
    assert await klog.end_offsets([0, 1, 2]) == {0: 5, 1: 1, 2: 0}
    assert await take(klog, 0, 0, 5) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert await take(klog, 0, 3, 2) == [(3, b"d"), (4, b"e")]
    assert await take(klog, 1, 0, 1) == [(0, b"x")]


async def test_bad_arguments_raise_typed_errors(klog: KafkaEventLog) -> None:
    with pytest.raises(UnknownPartitionError):
        await klog.append(3, b"x")
    with pytest.raises(InvalidRecordError):
        await klog.append(0, "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError):
        await klog.append_batch(0, [b"ok", 5])  # type: ignore[list-item]
    with pytest.raises(InvalidOffsetError):
        await take(klog, 0, -1, 1)
    with pytest.raises(UnknownPartitionError):
        await klog.end_offsets([7])
    # Nothing of the refused batch was written.
    assert await klog.end_offsets([0]) == {0: 0}


async def test_oversized_batch_is_refused_whole(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap, max_request_size=64 * 1024)
    async with log:
        with pytest.raises(EventLogRecordTooLargeError, match=f"{log.topic}-0"):
            await log.append_batch(0, [b"x" * 1024] * 100)
        assert await log.end_offsets([0]) == {0: 0}


async def test_concurrent_appenders_get_dense_offsets(klog: KafkaEventLog) -> None:
    values = [f"v{i}".encode() for i in range(256)]
    offsets = await asyncio.gather(*(klog.append(1, v) for v in values))
    assert sorted(offsets) == list(range(256))
    by_offset = dict(zip(offsets, values, strict=True))
    assert await take(klog, 1, 0, 256) == sorted(by_offset.items())
    assert await klog.end_offsets([1]) == {1: 256}


async def test_concurrent_batches_stay_contiguous(klog: KafkaEventLog) -> None:
    batches = [[f"b{b}-{i}".encode() for i in range(10)] for b in range(20)]
    results = await asyncio.gather(*(klog.append_batch(2, batch) for batch in batches))
    records = dict(await take(klog, 2, 0, 200))
    for batch, offsets in zip(batches, results, strict=True):
        assert offsets == list(range(offsets[0], offsets[0] + 10))
        assert [records[o] for o in offsets] == batch


async def test_reader_follows_live_appends(klog: KafkaEventLog) -> None:
    await klog.append(0, b"old")
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    async def reader() -> None:
        async for record in klog.read(0, 0):
            got.append(record)
            if len(got) == 4:
                done.set()
                return

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.3)
    await klog.append(0, b"new1")
    await klog.append_batch(0, [b"new2", b"new3"])
    await asyncio.wait_for(done.wait(), 10)
    await task
    assert got == [(0, b"old"), (1, b"new1"), (2, b"new2"), (3, b"new3")]


async def test_readers_share_one_consumer_with_different_starts(klog: KafkaEventLog) -> None:
    await klog.append_batch(0, [f"a{i}".encode() for i in range(10)])
    await klog.append_batch(1, [f"b{i}".encode() for i in range(5)])
    late = await take(klog, 0, 7, 3)
    # Started after the first reader moved past offset 0: the log seeks back.
    early, other, past_end = await _readers_with_live_append(klog)
    assert late == [(7, b"a7"), (8, b"a8"), (9, b"a9")]
    assert early == [(i, f"a{i}".encode()) for i in range(10)]
    assert other == [(2, b"b2"), (3, b"b3"), (4, b"b4")]
    assert past_end == [(10, b"a10"), (11, b"a11")]


async def _readers_with_live_append(
    klog: KafkaEventLog,
) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    past_end_task = asyncio.create_task(take(klog, 0, 10, 2))
    early_task = asyncio.create_task(take(klog, 0, 0, 10))
    other_task = asyncio.create_task(take(klog, 1, 2, 3))
    await asyncio.sleep(0.3)
    await klog.append_batch(0, [b"a10", b"a11"])
    return await early_task, await other_task, await past_end_task


async def test_slow_reader_is_paused_not_dropped(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap, max_buffered_batches=2)
    async with log:
        fanout = log._fanout
        assert fanout is not None and fanout._consumer is not None
        consumer = fanout._consumer
        pauses: list[object] = []
        real_pause = consumer.pause

        def spy_pause(*tps: TopicPartition) -> None:
            pauses.extend(tps)
            real_pause(*tps)

        consumer.pause = spy_pause
        seen: list[int] = []
        stalled = False

        async def writer() -> None:
            for i in range(12):
                await log.append_batch(0, [f"{i}-{j}".encode() for j in range(3)])
                await asyncio.sleep(0.05)

        writing = asyncio.create_task(writer())
        async for batch in log.read_batches(0, 0):
            seen.extend(o for o, _ in batch)
            if not stalled:
                stalled = True
                await asyncio.sleep(0.6)  # stall while the writer goes on: the queue fills
            if len(seen) >= 36:
                break
        await writing
        assert seen == list(range(36))
        assert TopicPartition(log.topic, 0) in pauses, "the slow reader was never paused"
        assert fanout._paused == set()


async def test_two_instances_see_the_same_events_in_order(kafka_bootstrap: str) -> None:
    topic = new_topic()
    first = make_log(kafka_bootstrap, topic=topic)
    second = make_log(kafka_bootstrap, topic=topic)
    async with first, second:
        writes = [
            first.append(0, b"1a"),
            second.append(0, b"2a"),
            first.append_batch(0, [b"1b", b"1c"]),
            second.append_batch(0, [b"2b", b"2c"]),
        ]
        await asyncio.gather(*writes)
        seen_first = await take(first, 0, 0, 6)
        seen_second = await take(second, 0, 0, 6)
        assert seen_first == seen_second
        assert [o for o, _ in seen_first] == list(range(6))
        assert {v for _, v in seen_first} == {b"1a", b"2a", b"1b", b"1c", b"2b", b"2c"}
        assert await first.end_offsets([0]) == await second.end_offsets([0]) == {0: 6}


async def test_raw_kafka_consumer_reads_exactly_the_appended_bytes(klog: KafkaEventLog) -> None:
    payloads = [bytes(range(256)), b"", b"\x00" * 1000, "ünïcødé".encode()]
    single = await klog.append(2, payloads[0], key=b"key-0")
    batch = await klog.append_batch(2, payloads[1:])
    consumer = AIOKafkaConsumer(
        bootstrap_servers=klog.bootstrap_servers, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(klog.topic, 2)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records: list[ConsumerRecord[bytes, bytes]] = []
        while len(records) < 4:
            fetched = await consumer.getmany(tp, timeout_ms=2000)
            assert fetched, "raw consumer got nothing"
            records.extend(fetched[tp])
    finally:
        await consumer.stop()
    assert [r.offset for r in records] == [single, *batch]
    assert [r.value or b"" for r in records] == payloads
    assert records[0].key == b"key-0"
    assert [r.key for r in records[1:]] == [None, None, None]


async def test_close_ends_readers_and_refuses_writes(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap)
    await log.start()
    await log.append(0, b"x")
    received: list[int] = []

    async def reader() -> str:
        async for batch in log.read_batches(0, 0):
            received.extend(o for o, _ in batch)
        return "ended"

    tasks = [asyncio.create_task(reader()) for _ in range(3)]
    await asyncio.sleep(0.5)
    await log.close()
    assert await asyncio.wait_for(asyncio.gather(*tasks), 5) == ["ended"] * 3
    assert received == [0, 0, 0]
    await log.close()  # idempotent
    with pytest.raises(EventLogClosedError):
        await log.append(0, b"y")
    with pytest.raises(EventLogClosedError):
        await log.end_offsets([0])


async def test_fifty_partitions_are_served_by_one_shared_consumer(kafka_bootstrap: str) -> None:
    log = make_log(kafka_bootstrap, partitions=50)
    async with log:
        fanout = log._fanout
        assert fanout is not None
        readers = [asyncio.create_task(take(log, p, 0, 2)) for p in range(50)]
        await asyncio.sleep(0.3)
        assert fanout.reader_count == 50
        await asyncio.gather(*(log.append(p, f"p{p}-0".encode()) for p in range(50)))
        await asyncio.gather(*(log.append_batch(p, [f"p{p}-1".encode()]) for p in range(50)))
        results = await asyncio.gather(*readers)
        for p, records in enumerate(results):
            assert records == [(0, f"p{p}-0".encode()), (1, f"p{p}-1".encode())]
        assert fanout.reader_count == 0  # finished readers detach (and unassign)
        assert await log.end_offsets(range(50)) == dict.fromkeys(range(50), 2)


async def test_end_offsets_right_after_the_topic_is_created(kafka_bootstrap: str) -> None:
    """Apache Kafka answers NOT_LEADER_OR_FOLLOWER for a while after creating a topic:
    end offsets wait for the partitions' leaders instead of failing (Tansu hid this)."""
    log = make_log(kafka_bootstrap, partitions=50)
    async with log:
        assert log.topic_created
        assert await log.end_offsets(range(50)) == dict.fromkeys(range(50), 0)


def test_broker_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    try:
        broker = TansuBroker("bogus://nowhere/", log_dir=str(tmp_path))
    except BrokerStartError as e:
        pytest.skip(f"no Tansu binary: {e}")
    with pytest.raises(BrokerStartError) as info:
        broker.start(timeout=10)
    assert "UnsupportedStorageUrl" in str(info.value)
    assert broker.process is None or broker.process.poll() is not None
