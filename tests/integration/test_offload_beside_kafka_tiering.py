"""The sidecar beside a broker that tiers with Kafka's own RemoteLogManager.

The session's Apache Kafka broker tiers a topic itself (TopicBasedRemoteLogMetadataManager
and LocalTieredStorage) and keeps tiering while `rlmm offload` runs over its log dir,
on the same ``__remote_log_metadata``, with a remote retention of one millisecond: if
it took Kafka's segments for its own it would delete them at once.

Invariants checked: every record of Kafka's topic stays readable by a consumer from
offset 0; Kafka's remote files are all still there; for every segment Kafka tiered,
the metadata topic holds exactly Kafka's own add and COPY_SEGMENT_FINISHED events and
no rlmm-signed segment exists in that topic; the sidecar says it skips the topic and
counts it, while it offloads a topic Kafka does not tier.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from prometheus_client import generate_latest

from rlmm.config import load_config
from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
from rlmm.offload.display import Display
from rlmm.offload.logdir import read_offset_checkpoint
from rlmm.offload.ownership import is_signed
from rlmm.offload.sidecar import Sidecar
from tests.fixtures.apache_kafka import METADATA_PARTITIONS, METADATA_TOPIC, ApacheKafkaBroker
from tests.integration.kafka_replay import decode_records, read_topic
from tests.integration.test_apache_kafka_tiered import tiered_files

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

SEGMENT_BYTES = 1 << 20
RECORD = 1000
PER_PARTITION = 2_600  # two and a half segments per partition, per batch


async def create_topics(bootstrap: str, tiered: str, plain: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([
            NewTopic(tiered, 2, 1, topic_configs={
                "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.ms": "1000", "retention.ms": "-1",
            }),
            NewTopic(plain, 1, 1, topic_configs={"segment.bytes": str(SEGMENT_BYTES)}),
        ])  # fmt: skip
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, partitions: int, start: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sends = []
        for p in range(partitions):
            for i in range(start, start + PER_PARTITION):
                value = (f"{p}:{i:08d}".encode() * (RECORD // 10 + 1))[:RECORD]
                sends.append(await producer.send(topic, value, partition=p))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


async def consume_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[int]]:
    """Offsets a consumer reads from offset 0 up to each partition's end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100,
    )  # fmt: skip
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        got: dict[int, list[int]] = {tp.partition: [] for tp in tps}
        async with asyncio.timeout(120):
            while any((got[tp.partition][-1] + 1 if got[tp.partition] else 0) < ends[tp]
                      for tp in tps):  # fmt: skip
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    got[tp.partition].extend(r.offset for r in records)
        return got
    finally:
        await consumer.stop()


def write_config(tmp: Path, broker: ApacheKafkaBroker, plain: str) -> Path:
    path = tmp / "offload.toml"
    path.write_text(f"""
data_dir = "{tmp / "rlmm"}"
[eventlog]
type = "kafka"
bootstrap_servers = "{broker.bootstrap}"
partitions = {METADATA_PARTITIONS}
replication_factor = 1
[snapshot]
enabled = false
[offload]
"retention.ms" = 1
"remote.log.manager.task.interval.ms" = 500
"leadership.poll.ms" = 500
[offload.topics.{plain}]
"retention.ms" = -1
""")
    return path


async def test_sidecar_never_touches_what_kafka_tiers(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = apache_kafka_broker
    tiered, plain = f"kt-{uuid4().hex[:8]}", f"plain-{uuid4().hex[:8]}"
    await create_topics(broker.bootstrap, tiered, plain)
    await produce(broker.bootstrap, tiered, 2, 0)
    await produce(broker.bootstrap, plain, 1, 0)
    async with asyncio.timeout(120):
        while min(len(tiered_files(broker.remote_dir, tiered, p)[1]) for p in (0, 1)) < 2:
            await asyncio.sleep(0.5)
    # The sidecar copies nothing past the high watermark Kafka checkpointed (every
    # replica.high.watermark.checkpoint.interval.ms, 5 s by default): wait for it, so
    # the --once run below finds the plain topic's two rolled segments copyable.
    checkpoint = broker.data_dir / "replication-offset-checkpoint"
    async with asyncio.timeout(60):
        while read_offset_checkpoint(checkpoint).get((plain, 0), -1) < PER_PARTITION:
            await asyncio.sleep(0.5)

    config = load_config(write_config(tmp_path, broker, plain), env={})
    with caplog.at_level(logging.INFO, logger="rlmm.offload"):
        first = Sidecar(config, [broker.data_dir], once=True, display=Display(rich=False))
        report = await first.run()
        # Kafka goes on tiering new data while a long-running sidecar runs beside it.
        sidecar = Sidecar(config, [broker.data_dir], display=Display(rich=False))
        running = asyncio.create_task(sidecar.run())
        await produce(broker.bootstrap, tiered, 2, PER_PARTITION)
        async with asyncio.timeout(120):
            while min(len(tiered_files(broker.remote_dir, tiered, p)[1]) for p in (0, 1)) < 4:
                await asyncio.sleep(0.5)
        await asyncio.sleep(3)  # a few more rounds of the sidecar
        sidecar.stop()
        await asyncio.wait_for(running, 60)

    assert report.tally.errors == []
    # other tests' topics on the session broker may be Kafka's too
    assert report.skipped_topics[tiered] == "kafka-tiered"
    assert plain not in report.skipped_topics
    said = [r.getMessage() for r in caplog.records]
    skipped = [m for m in said if f"never touching topic {tiered}" in m]
    assert len(skipped) == 2, skipped  # once per run of the sidecar
    assert "remote.storage.enable=true" in skipped[0]
    metrics = generate_latest(sidecar.metrics.registry).decode()
    gauge = 'rlmm_offload_topics_skipped{reason="kafka-tiered"} '
    counted = float(metrics.split(gauge)[1].split()[0])
    assert counted == len(report.skipped_topics) >= 1
    assert report.tally.copied >= 2  # the topic Kafka does not tier is rlmm's

    # Every record of Kafka's topic is still served, from offset 0.
    got = await consume_all(broker.bootstrap, tiered, 2)
    for p in (0, 1):
        assert got[p] == list(range(2 * PER_PARTITION)), p
    # Kafka's remote files and metadata: exactly Kafka's own events.
    files = {p: tiered_files(broker.remote_dir, tiered, p)[1] for p in (0, 1)}
    records = await read_topic(broker.bootstrap, METADATA_TOPIC, METADATA_PARTITIONS)
    events = [e for e in decode_records(r for rs in records.values() for r in rs)
              if e.topic_id_partition.topic == tiered]  # fmt: skip
    by_segment: dict[object, Counter[str]] = {}
    for e in events:
        assert isinstance(e, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate), e
        assert not is_signed(e.remote_log_segment_id), e
        kind = type(e).__name__ if isinstance(e, RemoteLogSegmentMetadata) else e.state.name
        by_segment.setdefault(e.remote_log_segment_id.id, Counter())[kind] += 1
    kafka_ids = {f.segment_id for p in (0, 1) for f in files[p]}
    assert kafka_ids <= set(by_segment)
    for segment_id in kafka_ids:
        assert by_segment[segment_id] == {
            "RemoteLogSegmentMetadata": 1, "COPY_SEGMENT_FINISHED": 1,
        }, segment_id  # fmt: skip
    # nothing of Kafka's topic went into rlmm's store
    store = tmp_path / "rlmm" / "remote"
    assert not list(store.glob(f"{tiered}-*"))
    assert list(store.glob(f"{plain}-*"))
