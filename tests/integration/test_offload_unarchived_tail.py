"""The unarchived tail of a real Apache Kafka 4.1.1 broker's partitions (issue 46, item 1).

260,000 records were produced, 254,510 archived and restored: each partition's active
segment was never copied (as in Kafka), and nothing said so. Here the session broker
rolls two 1 MiB segments per partition and keeps the rest in its active segment; one
round of `rlmm offload` archives the rolled ones.

Invariants checked: per partition, ``rlmm_unarchived_offsets`` equals the broker's log
end offset minus the archive's end and ``rlmm_unarchived_bytes`` the bytes of the
broker's segment files from the archive's end on (the active one), while
``rlmm_remote_copy_lag_bytes`` (Kafka's RemoteCopyLagBytes) is 0;
``rlmm_archive_newest_record_age_seconds`` is now minus the timestamp the producer gave
the last archived record (each record carries its own, a second apart); the topic's
partition with too few records to roll has nothing archived: all its offsets count,
and it has no age.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from prometheus_client import generate_latest

from rlmm.archive import open_metadata_view
from rlmm.config import load_config
from rlmm.offload.display import Display
from rlmm.offload.logdir import read_offset_checkpoint
from rlmm.offload.sidecar import Sidecar
from tests.fixtures.apache_kafka import ApacheKafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow,
              pytest.mark.timeout(300)]  # fmt: skip

SEGMENT_BYTES = 1 << 20
RECORD = 1000
COUNTS = {0: 2_600, 1: 2_600, 2: 40}  # two and a half segments; 2: not one rolled
STEP_MS = 1000  # record i of a partition is stamped base + i seconds


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, len(COUNTS), 1, topic_configs={"segment.bytes": str(SEGMENT_BYTES)})]
        )
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, base_ms: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sends = []
        for p, count in COUNTS.items():
            for i in range(count):
                value = (f"{p}:{i:08d}".encode() * (RECORD // 10 + 1))[:RECORD]
                stamp = base_ms + i * STEP_MS
                sends.append(await producer.send(topic, value, partition=p, timestamp_ms=stamp))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


async def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in COUNTS])
        return {tp.partition: end for tp, end in ends.items()}
    finally:
        await consumer.stop()


def samples(body: str, name: str, topic: str) -> dict[int, float]:
    line = re.compile(rf'^{name}\{{partition="(\d+)",topic="{re.escape(topic)}"\}} (\S+)$', re.M)
    return {int(p): float(v) for p, v in line.findall(body)}


def write_config(tmp: Path, broker: ApacheKafkaBroker, topic: str) -> Path:
    """A file event log (Kafka's own __remote_log_metadata is left to Kafka) and
    leadership from the broker; only ``topic`` of the session broker is offloaded."""
    path = tmp / "offload.toml"
    path.write_text(f"""
data_dir = "{tmp / "rlmm"}"
[eventlog]
partitions = 4
[offload]
"bootstrap.servers" = "{broker.bootstrap}"
"remote.storage.enable" = false
"retention.ms" = -1
[offload.topics.{topic}]
"remote.storage.enable" = true
""")
    return path


async def test_the_tail_the_archive_lacks_on_a_real_broker(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    broker = apache_kafka_broker
    topic = f"tail-{uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    base_ms = int(time.time() * 1000) - 3_600_000  # the first record an hour ago
    await produce(broker.bootstrap, topic, base_ms)
    ends = await log_ends(broker.bootstrap, topic)
    assert ends == COUNTS
    # The sidecar copies nothing past the high watermark Kafka checkpointed (every
    # replica.high.watermark.checkpoint.interval.ms, 5 s by default).
    checkpoint = broker.data_dir / "replication-offset-checkpoint"
    async with asyncio.timeout(60):
        while any(read_offset_checkpoint(checkpoint).get((topic, p), -1) < n
                  for p, n in COUNTS.items()):  # fmt: skip
            await asyncio.sleep(0.5)

    config_path = write_config(tmp_path, broker, topic)
    sidecar = Sidecar(
        load_config(config_path, env={}), [broker.data_dir], once=True, display=Display(rich=False)
    )
    report = await sidecar.run()
    assert report.tally.errors == [] and report.tally.copied >= 4
    body = sidecar.metrics.scrape(generate_latest).decode()
    scraped_at = time.time()

    with open_metadata_view(load_config(config_path, env={})) as view:
        archive_end: dict[int, int] = {}
        newest_ms: dict[int, int] = {}
        for p in COUNTS:
            tp = view.find(topic, p)
            ranges = [] if tp is None else view.lineage_ranges(tp)
            if ranges:
                archive_end[p] = ranges[-1].last_offset + 1
                newest_ms[p] = ranges[-1].segment.max_timestamp_ms
    assert set(archive_end) == {0, 1}  # partition 2 never rolled a segment

    offsets = samples(body, "rlmm_unarchived_offsets", topic)
    nbytes = samples(body, "rlmm_unarchived_bytes", topic)
    ages = samples(body, "rlmm_archive_newest_record_age_seconds", topic)
    lag = samples(body, "rlmm_remote_copy_lag_bytes", topic)
    for p, end in ends.items():
        start = archive_end.get(p, 0)
        # the active segment's records; all of partition 2's
        assert 0 < end - start < COUNTS[p] or (p == 2 and end - start == COUNTS[p]), p
        assert offsets[p] == end - start, p
        files = (broker.data_dir / f"{topic}-{p}").glob("*.log")
        local = sum(f.stat().st_size for f in files if int(f.stem) >= start)
        assert local > 0 and nbytes[p] == local, (p, nbytes[p], local)
        assert lag[p] == 0, p  # RemoteCopyLagBytes: the active segment is not counted
    for p, end in archive_end.items():
        # the last archived record is offset end - 1, stamped base + (end - 1) seconds
        assert newest_ms[p] == base_ms + (end - 1) * STEP_MS, p
        expected = scraped_at - newest_ms[p] / 1000
        assert abs(ages[p] - expected) < 2.0, (p, ages[p], expected)
        assert 3_600 - 3_000 < ages[p] < 3_600 + 300, (p, ages[p])
    assert set(ages) == {0, 1}, ages  # nothing archived of partition 2: no age
