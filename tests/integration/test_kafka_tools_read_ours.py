"""We write, Kafka's tools read: Apache Kafka's own decoders print every event we wrote.

- ``kafka.tools.DumpLogSegments --remote-log-metadata-decoder`` over the segment files
  of our embedded FileEventLog (no broker involved);
- ``ConsoleConsumer`` with ``RemoteLogMetadataSerde$RemoteLogMetadataFormatter`` over a
  metadata topic our manager published to on the real broker (its own topic name, so
  Kafka's RLMM on the same broker never sees it).

Invariant checked: each event's payload, as Kafka's deserializer renders it
(``toString``), equals the rendering of the event we wrote, field for field, in
offset order per metadata partition; the tools report no error.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from eventlog.file import FileEventLog
from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    kafka_uuid_to_str,
)
from rlmm.partitioning import metadata_partition_for
from tests.fixtures.apache_kafka import ApacheKafkaBroker, run_java
from tests.rlmm.factories import S, segment, tp, update

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka]

N = 3
FORMATTER = (
    "org.apache.kafka.server.log.remote.metadata.storage.serialization."
    "RemoteLogMetadataSerde$RemoteLogMetadataFormatter"
)


# -- Kafka's toString of each event (Kafka 4.1) ----------------------------------


def _java_tp(t: TopicIdPartition) -> str:
    return f"{kafka_uuid_to_str(t.topic_id)}:{t.topic}-{t.partition}"


def _java_segment_id(sid: RemoteLogSegmentId) -> str:
    tid = _java_tp(sid.topic_id_partition)
    return f"RemoteLogSegmentId{{topicIdPartition={tid}, id={kafka_uuid_to_str(sid.id)}}}"


def _java_custom(data: bytes | None) -> str:
    return "Optional.empty" if data is None else f"Optional[CustomMetadata{{{len(data)} bytes}}]"


def _java_map(epochs: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(epochs.items())) + "}"


def java_text(event: RemoteLogMetadata) -> str:
    """What Kafka's RemoteLogMetadataSerde + toString print for ``event``."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId="
            f"{_java_segment_id(event.remote_log_segment_id)}, "
            f"startOffset={event.start_offset}, endOffset={event.end_offset}, "
            f"brokerId={event.broker_id}, maxTimestampMs={event.max_timestamp_ms}, "
            f"eventTimestampMs={event.event_timestamp_ms}, "
            f"segmentLeaderEpochs={_java_map(event.segment_leader_epochs)}, "
            f"segmentSizeInBytes={event.segment_size_in_bytes}, "
            f"customMetadata={_java_custom(event.custom_metadata)}, "
            f"state={event.state.name}, txnIdxEmpty={str(event.txn_index_empty).lower()}}}"
        )
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId="
            f"{_java_segment_id(event.remote_log_segment_id)}, "
            f"customMetadata={_java_custom(event.custom_metadata)}, state={event.state.name}, "
            f"eventTimestampMs={event.event_timestamp_ms}, brokerId={event.broker_id}}}"
        )
    assert isinstance(event, RemotePartitionDeleteMetadata)
    return (
        f"RemotePartitionDeleteMetadata{{topicPartition={_java_tp(event.topic_id_partition)}, "
        f"state={event.state.name}, eventTimestampMs={event.event_timestamp_ms}, "
        f"brokerId={event.broker_id}}}"
    )


# -- a workload that uses every event type and field ------------------------------


async def write_workload(
    manager: TopicBasedRemoteLogMetadataManager, tps: list[TopicIdPartition]
) -> dict[int, list[RemoteLogMetadata]]:
    """Events published through ``manager``, per metadata partition, in write order."""
    rng = random.Random(13)
    written: dict[int, list[RemoteLogMetadata]] = {p: [] for p in range(N)}

    async def publish(event: RemoteLogMetadata) -> None:
        if isinstance(event, RemoteLogSegmentMetadata):
            await manager.add_remote_log_segment_metadata(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            await manager.update_remote_log_segment_metadata(event)
        else:
            await manager.put_remote_partition_delete_metadata(event)
        written[metadata_partition_for(event.topic_id_partition, N)].append(event)

    for i in range(24):
        t = tps[i % len(tps)]
        start = i * 1000
        epochs = {i // 4: start} if i % 3 else {i // 4: start, i // 4 + 1: start + 500}
        m = segment(
            t, start, start + 999, epochs, size=rng.randrange(1, 1 << 30),
            txn_index_empty=i % 2 == 0, broker_id=i % 3,
        )  # fmt: skip
        await publish(m)
        custom = bytes(rng.randrange(256) for _ in range(i)) if i % 4 == 1 else None
        await publish(update(m, S.COPY_SEGMENT_FINISHED, custom))
        if i % 5 == 0:
            await publish(update(m, S.DELETE_SEGMENT_STARTED))
            await publish(update(m, S.DELETE_SEGMENT_FINISHED))
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        await publish(RemotePartitionDeleteMetadata(tps[-1], state, 77, 2))
    assert all(written.values()), "the workload should use every metadata partition"
    return written


def topic_partitions() -> list[TopicIdPartition]:
    other = UUID("d3b5c0a2-4f7e-4c1b-9a8e-3f2d1c0b9a87")
    return [tp(i) for i in range(4)] + [tp(0, topic="bar.baz_-1", topic_id=other)]


PAYLOAD = re.compile(r"^\| offset: (\d+) .* payload: (.*)$")


async def test_dump_log_segments_decodes_our_file_event_log(
    apache_kafka_libs: Path, tmp_path: Path
) -> None:
    tps = topic_partitions()
    manager = TopicBasedRemoteLogMetadataManager(FileEventLog(tmp_path / "log", N))
    async with manager:
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 10)
        written = await write_workload(manager, tps)

    for p in range(N):
        files = sorted((tmp_path / "log" / f"__remote_log_metadata-{p}").glob("*.log"))
        assert files, f"metadata partition {p}: no segment file"
        done = await asyncio.to_thread(
            run_java,
            apache_kafka_libs,
            "kafka.tools.DumpLogSegments",
            "--remote-log-metadata-decoder",
            "--files",
            ",".join(map(str, files)),
        )
        assert done.returncode == 0, done.stderr
        assert "Exception" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert "isvalid: false" not in done.stdout
        printed = [PAYLOAD.match(line) for line in done.stdout.splitlines()]
        got = [(int(m[1]), m[2]) for m in printed if m]
        expected = [(o, java_text(e)) for o, e in enumerate(written[p])]
        assert got == expected, f"metadata partition {p}"


async def test_console_consumer_formats_what_our_manager_published(
    apache_kafka_broker: ApacheKafkaBroker,
) -> None:
    topic = f"rlmm-ours-{uuid4().hex[:8]}"  # not Kafka's RLMM's own topic
    tps = topic_partitions()
    log = KafkaEventLog(
        apache_kafka_broker.bootstrap, N, KafkaLogSettings(topic=topic, replication_factor=1)
    )
    async with TopicBasedRemoteLogMetadataManager(log, close_event_log=True) as manager:
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 30)
        written = await write_workload(manager, tps)
    total = sum(len(events) for events in written.values())

    done = await asyncio.to_thread(
        run_java,
        apache_kafka_broker.libs,
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", apache_kafka_broker.bootstrap,
        "--topic", topic,
        "--from-beginning",
        "--max-messages", str(total),
        "--timeout-ms", "60000",
        "--formatter", FORMATTER,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    # The formatter prints "partition: P, offset: O, value: <toString>" per record.
    pattern = re.compile(r"^partition: (\d+), offset: (\d+), value: (.*)$")
    matches = [pattern.match(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches, strict=True) if not m][:3]
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(N)}
    for m in matches:
        assert m is not None
        got[int(m[1])].append((int(m[2]), m[3]))
    assert "ERROR" not in done.stderr, done.stderr
    for p in range(N):
        assert got[p] == [(o, java_text(e)) for o, e in enumerate(written[p])], f"partition {p}"
