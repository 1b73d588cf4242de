"""Spark's own Kafka source against ours: the same records, live and from the archive.

Records go to a plain topic on the real Apache Kafka broker: three partitions, keys
(some null), headers, one committed and one aborted transaction. The rolled segments
in the broker's own log dir are offloaded by our sidecar (``rlmm offload`` logic, one
round). Then Spark reads the same offsets twice: live with ``format("kafka")`` (Spark's
spark-sql-kafka, fetched with Maven) and from the archive with ``format("kafka-archive")``.

Invariant checked: the two DataFrames are equal row for row, all columns and headers
included, under ``read_uncommitted`` and under ``read_committed``
(``kafka.isolation.level``); aborted records appear only in the first. The same holds
with filters that kafka-archive pushes down (a timestamp window, a partition, an
offset range, IN, the topic, and their AND): Spark's Kafka source reads everything
and filters, kafka-archive prunes and Spark filters what it returns. And with Spark's
``startingTimestamp`` / ``endingTimestamp`` options: both resolve them to the same
offsets (the broker by its time index, the archive by its segments' timestamps). A
window over one of several segments plans that segment alone (those after it skipped
by the smallest timestamp our offloader records), with the Kafka source's rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from rlmm.config import load_config
from rlmm.offload.logdir import read_offset_checkpoint
from rlmm.offload.sidecar import run_sidecar
from tests.fixtures.apache_kafka import (
    ApacheKafkaBroker,
    ApacheKafkaUnavailable,
    spark_kafka_jars,
)
from tests.fixtures.kafka import BrokerStartError

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
SEGMENT_MS = 1500
EVENTLOG_PARTITIONS = 4  # of the embedded metadata log offload_topic writes
ISOLATION = ["read_uncommitted", "read_committed"]


def headers_for(i: int) -> list[tuple[str, bytes]]:
    if i % 3 == 0:
        return []
    return [("trace", f"t-{i}".encode()), ("bin", bytes([i % 256, 0, 255]))][: 1 + i % 2]


async def produce(bootstrap: str, topic: str, base_ts: int | None = None) -> dict[int, int]:
    """Plain records, a committed and an aborted transaction, then (after segment.ms)
    one record per partition that rolls the segment; returns those records' offsets.
    Record ``i`` has the timestamp ``base_ts + i`` (default: a minute ago)."""
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 60_000
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    txn = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"rlmm-test-{topic}", enable_idempotence=True
    )
    await plain.start()
    await txn.start()
    try:

        async def send_plain(start: int, count: int) -> None:
            for i in range(start, start + count):
                key = None if i % 5 == 0 else f"key-{i % 7}".encode()
                await plain.send_and_wait(
                    topic, f"value-{i}".encode() * (1 + i % 4), key=key,
                    partition=i % PARTITIONS, timestamp_ms=base_ts + i, headers=headers_for(i),
                )  # fmt: skip

        await send_plain(0, 60)
        async with txn.transaction():  # committed
            for i in range(100, 110):
                await txn.send(topic, f"committed-{i}".encode(), key=b"c", partition=i % 2,
                               timestamp_ms=base_ts + i, headers=[("txn", b"commit")])  # fmt: skip
        await txn.begin_transaction()  # aborted
        for i in range(200, 210):
            await txn.send(topic, f"aborted-{i}".encode(), key=b"a", partition=1 + i % 2,
                           timestamp_ms=base_ts + i, headers=[("txn", b"abort")])  # fmt: skip
        await txn.abort_transaction()
        await send_plain(300, 30)
        await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)
        ends = {}
        for p in range(PARTITIONS):
            meta = await plain.send_and_wait(topic, b"roll", partition=p)
            ends[p] = meta.offset
        return ends
    finally:
        await txn.stop()
        await plain.stop()


async def create_topic(
    bootstrap: str, topic: str, partitions: int = PARTITIONS,
    configs: Mapping[str, str] | None = None,
) -> None:  # fmt: skip
    """A plain topic (Kafka does not tier it) that keeps everything and rolls its
    segments by record timestamps every SEGMENT_MS, unless ``configs`` say otherwise."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        settings = {"segment.ms": str(SEGMENT_MS), "retention.ms": "-1", **(configs or {})}
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=settings)])
    finally:
        await admin.close()


async def offload_topic(
    broker: ApacheKafkaBroker, topic: str, ends: Mapping[int, int], work: Path,
    remote: Mapping[str, str] | None = None,
) -> Path:  # fmt: skip
    """One round of our sidecar over the broker's log dir, for ``topic`` only, once the
    broker checkpointed a high watermark past each partition's ``ends`` offset; the
    segments go to ``remote`` (``[remote]`` settings; default: local storage under
    ``work``). Returns the rlmm config written under ``work``."""
    # The sidecar copies nothing past the high watermark Kafka checkpointed (every
    # replica.high.watermark.checkpoint.interval.ms, 5 s by default): wait for it.
    checkpoint = broker.data_dir / "replication-offset-checkpoint"
    async with asyncio.timeout(60):
        while True:
            marks = read_offset_checkpoint(checkpoint)
            if all(marks.get((topic, p), -1) > end for p, end in ends.items()):
                break
            await asyncio.sleep(0.5)
    remote_toml = "".join(f'"{k}" = "{v}"\n' for k, v in (remote or {}).items())
    remote_toml = f"[remote]\n{remote_toml}" if remote_toml else ""
    config_path = work / "rlmm.toml"
    config_path.write_text(
        f"""
data_dir = "{work / "rlmm"}"
[eventlog]
partitions = {EVENTLOG_PARTITIONS}
{remote_toml}[offload]
"remote.storage.enable" = false
"remote.log.manager.task.interval.ms" = 200
[offload.topics.{topic}]
"remote.storage.enable" = true
"retention.ms" = -1
"""
    )
    config = load_config(config_path, env={})
    report = await run_sidecar(config, [broker.data_dir], once=True)
    assert report.tally.errors == [] and report.tally.copied >= len(ends), report
    return config_path


def pushed_filters(topic: str, base_ts: int) -> list[str]:
    """Conditions kafka-archive pushes down; record ``i`` is stamped ``base_ts + i`` ms."""

    def ts(offset_ms: int, micros: int = 0) -> str:
        at = datetime.fromtimestamp((base_ts + offset_ms) / 1000, UTC)
        return f"timestamp'{at.replace(microsecond=at.microsecond + micros).isoformat()}'"

    window = f"timestamp >= {ts(20)} AND timestamp < {ts(105)}"  # plain and committed
    return [
        window,
        f"timestamp BETWEEN {ts(200)} AND {ts(305, 500)}",  # aborted; .5 ms rounds
        f"timestamp > {ts(320)}",
        "partition = 1",
        "offset >= 5 AND offset < 17",
        "partition IN (0, 2) AND offset IN (3, 8, 21)",
        f"topic = '{topic}' AND partition = 2 AND {window}",
        f"topic IN ('{topic}', 'other') AND offset <= 4",
        "partition = 0 AND partition = 1",
    ]


def read_with_spark(request: dict[str, object], work: Path) -> dict[str, list[dict[str, object]]]:
    """Both reads in a child process with its own Spark JVM (spark.jars is per JVM)."""
    (work / "request.json").write_text(json.dumps(request))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.spark_kafka_reads", str(work / "request.json")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its Spark JVM is in the group: killed with it
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        _out, err = child.communicate(timeout=240)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
    assert child.returncode == 0, err.decode(errors="replace")[-4000:]
    result: dict[str, list[dict[str, object]]] = json.loads(
        Path(str(request["output"])).read_text()
    )
    return result


async def kafka_source_jars() -> list[Path]:
    """Spark's Kafka source jars (fetched with Maven); the test is skipped without Java
    or Maven, and fails naming the jars when they cannot be had."""
    try:
        return await asyncio.to_thread(spark_kafka_jars)
    except ApacheKafkaUnavailable as e:
        pytest.skip(f"needs Java and Maven: {e}")
    except BrokerStartError as e:
        pytest.fail(f"Spark's Kafka source jars: {e}", pytrace=False)


async def test_spark_kafka_source_equals_kafka_archive(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    jars = await kafka_source_jars()
    broker = apache_kafka_broker
    topic = f"spark-src-{uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    base_ts = int(time.time()) * 1000 - 60_000  # a whole second: SQL literals stay short
    ends = await produce(broker.bootstrap, topic, base_ts)

    # Our sidecar offloads the rolled segments of this topic from the broker's log dir.
    config_path = await offload_topic(broker, topic, ends, tmp_path)

    result = await asyncio.to_thread(
        read_with_spark,
        {
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "ending": ends,
            "isolation": ISOLATION,
            "jars": [str(j) for j in jars],
            "rlmm_config": str(config_path),
            "filters": (filters := pushed_filters(topic, base_ts)),
            # Spark's timestamp options resolve to offsets per partition (the first whose
            # timestamp is at or after them): the same offsets from the broker's time
            # index and from the archive, whose segments carry their smallest timestamp.
            "time_options": {
                "startingTimestamp": str(base_ts + 20),
                "endingTimestamp": str(base_ts + 105),
            },
            "output": str(tmp_path / "rows.json"),
        },
        tmp_path,
    )
    for isolation in ISOLATION:
        live, archived = result[f"kafka/{isolation}"], result[f"kafka-archive/{isolation}"]
        assert archived == live, f"{isolation}: kafka-archive differs from Spark's Kafka source"
        for condition in filters:
            live = result[f"kafka/{isolation}/{condition}"]
            archived = result[f"kafka-archive/{isolation}/{condition}"]
            assert archived == live, f"{isolation}, where {condition}: kafka-archive differs"
        window = result[f"kafka/{isolation}/{filters[0]}"]
        assert 0 < len(window) < len(result[f"kafka/{isolation}"])
    timed = result["kafka/read_uncommitted/options"]
    assert result["kafka-archive/read_uncommitted/options"] == timed
    assert 0 < len(timed) < len(result["kafka/read_uncommitted"])
    uncommitted, committed = result["kafka/read_uncommitted"], result["kafka/read_committed"]
    values = [bytes.fromhex(str(r["value"])) for r in uncommitted]
    assert sum(v.startswith(b"aborted-") for v in values) == 10
    assert not any(bytes.fromhex(str(r["value"])).startswith(b"aborted-") for r in committed)
    assert sum(bytes.fromhex(str(r["value"])).startswith(b"committed-") for r in committed) == 10
    assert len(committed) == 60 + 10 + 30
    assert any(r["headers"] for r in committed) and any(r["key"] is None for r in committed)
    assert {r["partition"] for r in committed} == set(range(PARTITIONS))


GROUPS, PER_GROUP, GROUP_GAP_MS = 5, 8, 3000  # GROUP_GAP_MS > SEGMENT_MS: a segment each


async def test_a_window_plans_only_its_segment_and_reads_the_kafka_sources_rows(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    """One partition whose record timestamps roll a segment every PER_GROUP records
    (Kafka rolls by record time: a group is GROUP_GAP_MS after the one before). A window
    over the middle group plans that segment alone: the two before it are skipped by
    their largest timestamp, the two after it by the smallest one our offloader recorded
    in their custom metadata. Its rows equal Spark's Kafka source's filtered the same
    way."""
    from rlmm.archive import RowBounds
    from rlmm.spark.options import parse_options
    from rlmm.spark.planning import plan

    jars = await kafka_source_jars()
    broker = apache_kafka_broker
    topic = f"spark-window-{uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic, partitions=1)
    base_ts = int(time.time()) * 1000 - 120_000  # a whole second: SQL literals stay short
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(GROUPS * PER_GROUP):
            at = base_ts + (i // PER_GROUP) * GROUP_GAP_MS + i % PER_GROUP
            await producer.send_and_wait(topic, f"v-{i}".encode(), partition=0, timestamp_ms=at)
        roll = await producer.send_and_wait(topic, b"roll", partition=0)  # stamped now
    finally:
        await producer.stop()
    ends = {0: roll.offset}
    config_path = await offload_topic(broker, topic, ends, tmp_path)

    middle = GROUPS // 2
    w0 = base_ts + middle * GROUP_GAP_MS
    w1 = w0 + PER_GROUP  # exclusive
    options = parse_options(
        {
            "config": str(config_path),
            "subscribe": topic,
            "endingOffsets": json.dumps({topic: {"0": roll.offset}}),
        }
    )
    whole = plan(options)
    window = plan(options, RowBounds(min_timestamp_ms=w0, max_timestamp_ms=w1 - 1))
    assert [(s.from_offset, s.until_offset) for s in whole] == [
        (g * PER_GROUP, (g + 1) * PER_GROUP) for g in range(GROUPS)
    ]
    assert [(s.from_offset, s.until_offset) for s in window] == [
        (middle * PER_GROUP, (middle + 1) * PER_GROUP)
    ]

    def sql(ms: int) -> str:
        return f"timestamp'{datetime.fromtimestamp(ms / 1000, UTC).isoformat()}'"

    condition = f"timestamp >= {sql(w0)} AND timestamp < {sql(w1)}"
    result = await asyncio.to_thread(
        read_with_spark,
        {
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "ending": ends,
            "isolation": ["read_uncommitted"],
            "jars": [str(j) for j in jars],
            "rlmm_config": str(config_path),
            "filters": [condition],
            "output": str(tmp_path / "rows.json"),
        },
        tmp_path,
    )
    live = result[f"kafka/read_uncommitted/{condition}"]
    assert result[f"kafka-archive/read_uncommitted/{condition}"] == live
    assert [r["offset"] for r in live] == list(range(middle * PER_GROUP, (middle + 1) * PER_GROUP))
    assert result["kafka-archive/read_uncommitted"] == result["kafka/read_uncommitted"]
