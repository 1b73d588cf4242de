"""Kafka's tiered storage writes, we read: our manager over Kafka's own ``__remote_log_metadata``.

The session's Apache Kafka broker runs Kafka's TopicBasedRemoteLogMetadataManager
and LocalTieredStorage. A topic with ``remote.storage.enable=true`` and 1 MiB
segments is produced to until Kafka has tiered several segments.

Invariants checked: every record Kafka's RLMM wrote decodes with our codec; our
read-only manager (the partition assigned as a follower) lists exactly the
segments LocalTieredStorage holds (ids, start/end offsets, leader epochs, sizes,
COPY_SEGMENT_FINISHED), and its state equals a replay of the raw records;
``rlmm events`` prints every record of the topic with no error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tests.fixtures.apache_kafka import METADATA_PARTITIONS, METADATA_TOPIC, ApacheKafkaBroker
from tests.integration.kafka_replay import decode_records, digest, read_topic, replay

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

SEGMENT_BYTES = 1 << 20  # Kafka 4's minimum segment.bytes
RECORD = 1000
RECORDS = 5_500  # about 5.6 MiB: five rolled segments, tiered; the active one stays
MIN_TIERED = 4


def kafka_uuid(text: str) -> uuid.UUID:
    """A Kafka Uuid from its base64url text (as in LocalTieredStorage's file names)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@dataclass(frozen=True)
class TieredFile:
    """One segment file LocalTieredStorage wrote."""

    segment_id: uuid.UUID
    segment_id_text: str  # as Kafka prints it
    start_offset: int
    size: int


def tiered_files(
    remote_dir: Path, topic: str, partition: int
) -> tuple[uuid.UUID, list[TieredFile]]:
    """(topic id, segment files): LocalTieredStorage writes them as
    ``kafka-tiered-storage/<topic>-<partition>-<topic id>/<start>-<segment id>.log``."""
    dirs = list((remote_dir / "kafka-tiered-storage").glob(f"{topic}-{partition}-*"))
    if not dirs:
        return uuid.UUID(int=0), []
    [directory] = dirs
    topic_id = kafka_uuid(directory.name.removeprefix(f"{topic}-{partition}-"))
    files = []
    for path in sorted(directory.glob("*.log")):
        start, _, segment_id = path.stem.partition("-")
        assert len(start) == 20, path
        files.append(
            TieredFile(kafka_uuid(segment_id), segment_id, int(start), path.stat().st_size)
        )
    return topic_id, sorted(files, key=lambda f: f.start_offset)


def local_base_offsets(data_dir: Path, topic: str, partition: int) -> list[int]:
    return sorted(int(p.stem) for p in (data_dir / f"{topic}-{partition}").glob("*.log"))


async def produce(bootstrap: str, topic: str) -> tuple[int, int]:
    """RECORDS values of RECORD bytes to partition 0; (first, last) timestamps used."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        first = int(time.time() * 1000)
        pending = []
        for i in range(RECORDS):
            value = (f"{i:08d}".encode() * (RECORD // 8 + 1))[:RECORD]
            pending.append(await producer.send(topic, value, partition=0, timestamp_ms=first + i))
        await asyncio.gather(*pending)
        return first, first + RECORDS - 1
    finally:
        await producer.stop()


async def create_tiered_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.ms": "1000",
            "retention.ms": "-1",
        }
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def test_manager_lists_exactly_what_kafkas_rlmm_tiered(
    apache_kafka_broker: ApacheKafkaBroker,
) -> None:
    broker = apache_kafka_broker
    topic = f"tiered-{uuid4().hex[:8]}"
    await create_tiered_topic(broker.bootstrap, topic)
    first_ts, last_ts = await produce(broker.bootstrap, topic)

    # Kafka's RemoteLogManager copies every rolled segment (task interval 500 ms).
    async with asyncio.timeout(120):
        while len(tiered_files(broker.remote_dir, topic, 0)[1]) < MIN_TIERED:
            await asyncio.sleep(0.5)
    topic_id, _ = tiered_files(broker.remote_dir, topic, 0)
    tp = TopicIdPartition(topic_id, topic, 0)

    log = KafkaEventLog(
        broker.bootstrap,
        METADATA_PARTITIONS,
        KafkaLogSettings(topic=METADATA_TOPIC, replication_factor=1, create_topic=False),
    )
    async with TopicBasedRemoteLogMetadataManager(log, close_event_log=True) as manager:
        await manager.on_partition_leadership_changes([], [tp])  # a follower: read only
        await manager.wait_until_ready([tp], 30)

        # Settled: every file LocalTieredStorage holds is listed, copy finished.
        def view() -> tuple[list[TieredFile], list[RemoteLogSegmentMetadata]]:
            return (
                tiered_files(broker.remote_dir, topic, 0)[1],
                sorted(manager.list_remote_log_segments(tp), key=lambda s: s.start_offset),
            )

        # Kafka may still tier a segment it could not copy yet (the high watermark is
        # checkpointed every 5 s): settled means agreeing and unchanged for 6 s.
        loop = asyncio.get_running_loop()
        agreed_since: float | None = None
        agreed_ids: list[object] = []
        async with asyncio.timeout(90):
            while True:
                files, segments = view()
                finished = all(
                    s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in segments
                )
                ids = [f.segment_id for f in files]
                if finished and ids == [s.remote_log_segment_id.id for s in segments]:
                    if ids != agreed_ids or agreed_since is None:
                        agreed_since, agreed_ids = loop.time(), ids
                    elif loop.time() - agreed_since >= 6:
                        break
                else:
                    agreed_since = None
                await asyncio.sleep(0.3)
        files, segments = view()
        fingerprint = manager.fingerprint([tp])
        highest = manager.highest_offset_for_epoch(tp, 0)
        # What the manager had applied when it agreed: Kafka may start copying the next
        # segment any time after (its add in the topic, its finish not yet).
        applied = manager.applied_offsets

    assert len(segments) >= MIN_TIERED
    local = local_base_offsets(broker.data_dir, topic, 0)
    for i, (f, s) in enumerate(zip(files, segments, strict=True)):
        assert s.remote_log_segment_id.id == f.segment_id
        assert s.topic_id_partition == tp
        assert s.start_offset == f.start_offset
        assert s.segment_size_in_bytes == f.size, f"segment {i}: size"
        assert s.segment_size_in_bytes <= SEGMENT_BYTES
        assert dict(s.segment_leader_epochs) == {0: s.start_offset}
        assert s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        assert s.broker_id == 1
        assert first_ts <= s.max_timestamp_ms <= last_ts
        # Contiguous: each segment ends where the next (remote, or local) begins.
        following = files[i + 1].start_offset if i + 1 < len(files) else None
        if following is None:
            following = min(b for b in local if b > f.start_offset)
        assert s.end_offset == following - 1, f"segment {i}: end offset"
    assert segments[0].start_offset == 0
    assert highest == segments[-1].end_offset

    # Every record Kafka's RLMM wrote decodes with our codec; for this partition, one
    # add and one COPY_SEGMENT_FINISHED update per segment, in that order.
    read = await read_topic(broker.bootstrap, METADATA_TOPIC, METADATA_PARTITIONS)
    records = {p: [r for r in rs if r.offset <= applied.get(p, -1)] for p, rs in read.items()}
    events = decode_records(r for rs in records.values() for r in rs)
    assert len(events) == sum(len(rs) for rs in records.values())
    mine = [e for e in events if e.topic_id_partition == tp]
    kinds = Counter(type(e).__name__ for e in mine)
    assert kinds == {
        RemoteLogSegmentMetadata.__name__: len(segments),
        RemoteLogSegmentMetadataUpdate.__name__: len(segments),
    }
    # Our state equals a replay of the raw records, event for event.
    assert digest(replay(records).fingerprint([tp])) == digest(fingerprint)

    # `rlmm events` decodes every record Kafka wrote, with no error line.
    cli = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable, "-m", "rlmm.cli", "events",
            "--set", "eventlog.type=kafka",
            "--set", f"eventlog.bootstrap_servers={broker.bootstrap}",
            "--set", f"eventlog.partitions={METADATA_PARTITIONS}",
        ],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    lines = [json.loads(line) for line in cli.stdout.splitlines()]
    assert not [line for line in lines if "error" in line]
    # Kafka keeps tiering while the CLI runs (this topic's or another test's new rolled
    # segments): every record read above is printed, and anything more is newer.
    printed_at = {(line["metadata_partition"], line["offset"]) for line in lines}
    read_at = {(r.partition, r.offset) for rs in records.values() for r in rs}
    assert read_at <= printed_at
    read_end = {p: max(r.offset for r in rs) for p, rs in records.items() if rs}
    assert all(o > read_end.get(p, -1) for p, o in printed_at - read_at)
    printed = {
        line["segment_id"]
        for line in lines
        if line.get("topic") == topic and (line["metadata_partition"], line["offset"]) in read_at
    }
    assert printed == {f.segment_id_text for f in files}
