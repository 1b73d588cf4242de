"""A bench topic on an Apache Kafka broker: created with its configs, its active
segments rolled, its local segment files listed (bench/restore.py, tiered_read.py,
spark_vs_kafka.py and plugin.py set their topics up the same way).

Invariant: ``create_topic`` raises on any CreateTopics error, so a bench never times a
topic that is not there; ``roll`` returns the offsets of the records that rolled the
active segments, the end of what a bench may wait to see tiered or copied.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.fixtures.apache_kafka import ApacheKafkaBroker, run_java

# 30 minutes: more than the benches' segment.ms, less than Kafka's
# message.timestamp.after.max.ms (1 h), which would refuse the record.
ROLL_AHEAD_MS = 1_800_000


async def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: dict[str, str]
) -> None:
    """One replica per partition (the benches run one broker a cluster)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(topic, partitions, 1, topic_configs=configs)]
        )
        for name, code, *message in response.topic_errors:
            if code != 0:
                raise RuntimeError(f"CreateTopics {name}: error {code} {message}")
    finally:
        await admin.close()


async def roll(
    bootstrap: str, topic: str, partitions: int, timestamp_ms: int | None = None
) -> dict[int, int]:
    """One record per partition stamped ``timestamp_ms`` (default: ROLL_AHEAD_MS from
    now), more than ``segment.ms`` past the active segment's first record: it rolls that
    segment. Returns those records' offsets."""
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000) + ROLL_AHEAD_MS
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        return {
            p: (
                await producer.send_and_wait(topic, b"roll", partition=p, timestamp_ms=timestamp_ms)
            ).offset
            for p in range(partitions)
        }
    finally:
        await producer.stop()


def producer_performance(
    broker: ApacheKafkaBroker, topic: str, records: int, record_size: int, timeout: int = 900
) -> None:
    """Kafka's ProducerPerformance writes ``records`` records of ``record_size`` bytes
    as fast as it goes (acks=1, 256 KiB batches)."""
    done = run_java(
        broker.libs, "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(records), "--record-size", str(record_size),
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}",
        "acks=1", "linger.ms=20", "batch.size=262144",
        timeout=timeout, heap="512m",
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ProducerPerformance failed:\n{done.stdout}{done.stderr}")


def local_bases(broker: ApacheKafkaBroker, topic: str, p: int) -> list[int]:
    """The base offsets of partition ``p``'s segments in the broker's log dir, sorted."""
    return sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))


__all__ = ["ROLL_AHEAD_MS", "create_topic", "local_bases", "producer_performance", "roll"]
