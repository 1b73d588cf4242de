"""TopicBasedRemoteLogMetadataManager on KafkaEventLog against a real broker (Tansu).

In one process: readiness (not ready while the metadata partition has a backlog,
not found when unassigned), read-your-writes after every await, interop with an
independent raw aiokafka reader (partitioning, null keys, byte-exact values in
order), and a restart that resumes from its snapshot and replays only the tail.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from uuid import uuid4

import pytest

from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.codec import decode, encode
from rlmm.errors import RemoteResourceNotFoundError, RemoteStorageNotReadyError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for
from rlmm.snapshotting import SnapshotPolicy
from snapshot import SnapshotStore
from tests.integration.kafka_replay import digest, read_topic, replay
from tests.rlmm.factories import S, segment, tp, update

pytestmark = pytest.mark.kafka

N = 5


def new_topic() -> str:
    return f"rlmm-manager-{uuid4().hex[:8]}"


# Tansu answers a long-polling fetch only when fetch.max.wait.ms expires, not when a
# record arrives (real Kafka answers at once), so a write's round trip through the
# apply loop costs about half of it: keep it short to keep the tests fast.
FETCH_MAX_WAIT_MS = 20


def kafka_log(bootstrap: str, topic: str, partitions: int = N) -> KafkaEventLog:
    return KafkaEventLog(
        bootstrap,
        partitions,
        KafkaLogSettings(
            topic=topic,
            replication_factor=1,
            consumer_config={"fetch_max_wait_ms": FETCH_MAX_WAIT_MS},
        ),
    )


@pytest.fixture
async def managers(kafka_bootstrap: str) -> AsyncIterator[list[TopicBasedRemoteLogMetadataManager]]:
    """Managers a test opens (appended by the test); all closed after it, before the broker."""
    opened: list[TopicBasedRemoteLogMetadataManager] = []
    yield opened
    for manager in opened:
        await manager.close()


async def open_manager(
    opened: list[TopicBasedRemoteLogMetadataManager],
    bootstrap: str,
    topic: str,
    leaders: Iterable[TopicIdPartition] = (),
    snapshot_policy: SnapshotPolicy | None = None,
) -> TopicBasedRemoteLogMetadataManager:
    manager = TopicBasedRemoteLogMetadataManager(
        kafka_log(bootstrap, topic), snapshot_policy=snapshot_policy, close_event_log=True
    )
    opened.append(manager)
    await manager.start()
    leaders = list(leaders)
    if leaders:
        await manager.on_partition_leadership_changes(leaders, [])
        await manager.wait_until_ready(leaders, 30)
    return manager


async def lifecycle(
    manager: TopicBasedRemoteLogMetadataManager, m: RemoteLogSegmentMetadata
) -> list[RemoteLogMetadata]:
    """Copy ``m`` (STARTED then FINISHED); the events written, in order."""
    finished = update(m, S.COPY_SEGMENT_FINISHED)
    await manager.add_remote_log_segment_metadata(m)
    await manager.update_remote_log_segment_metadata(finished)
    return [m, finished]


async def test_not_ready_while_backlog_unassigned_not_found(
    kafka_bootstrap: str, managers: list[TopicBasedRemoteLogMetadataManager]
) -> None:
    topic = new_topic()
    tp0 = tp(0)
    writer = await open_manager(managers, kafka_bootstrap, topic, [tp0])

    async def copy_range(first: int) -> None:
        for i in range(first, 150, 10):
            await lifecycle(writer, segment(tp0, i * 10, i * 10 + 9, {i // 50: i * 10}))

    await asyncio.gather(*(copy_range(first) for first in range(10)))
    p = metadata_partition_for(tp0, N)

    reader = await open_manager(managers, kafka_bootstrap, topic)
    with pytest.raises(RemoteResourceNotFoundError, match="not assigned"):
        reader.list_remote_log_segments(tp0)
    with pytest.raises(RemoteResourceNotFoundError, match="not assigned"):
        await reader.add_remote_log_segment_metadata(segment(tp0, 5000, 5009, {9: 5000}))

    await reader.on_partition_leadership_changes([], [tp0])
    # Assigned with 300 events of backlog: refused (retriable) until caught up, and
    # never a partial answer in between.
    not_ready = 0
    async with asyncio.timeout(30):
        while True:
            try:
                segments = reader.list_remote_log_segments(tp0)
                break
            except RemoteStorageNotReadyError as e:
                assert e.retriable and str(tp0) in str(e)
                assert not reader.is_ready(tp0)
                assert reader.applied_offsets.get(p, -1) < 299
                not_ready += 1
            # polling on purpose: this is what a broker's fetch path would see
            await asyncio.sleep(0.002)
    assert not_ready >= 1
    assert reader.is_ready(tp0) and reader.applied_offsets[p] >= 299
    assert len(segments) == 150
    assert reader.fingerprint([tp0]) == writer.fingerprint([tp0])
    with pytest.raises(RemoteResourceNotFoundError, match="not assigned"):
        reader.list_remote_log_segments(tp(1))


async def test_read_your_writes_after_each_await(
    kafka_bootstrap: str, managers: list[TopicBasedRemoteLogMetadataManager]
) -> None:
    topic = new_topic()
    tps = [tp(i) for i in range(4)]
    manager = await open_manager(managers, kafka_bootstrap, topic, tps)
    rng = random.Random(7)
    for i in range(40):
        t = rng.choice(tps)
        start = i * 100
        m = segment(t, start, start + 99, {1: start})
        await manager.add_remote_log_segment_metadata(m)
        listed = {s.remote_log_segment_id: s.state for s in manager.list_remote_log_segments(t)}
        assert listed[m.remote_log_segment_id] == S.COPY_SEGMENT_STARTED
        assert manager.remote_log_segment_metadata(t, 1, start + 50) is None
        await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
        got = manager.remote_log_segment_metadata(t, 1, start + 50)
        assert got is not None and got.remote_log_segment_id == m.remote_log_segment_id
        assert got.state == S.COPY_SEGMENT_FINISHED
        assert manager.highest_offset_for_epoch(t, 1) == start + 99
        if i % 5 == 0:
            await manager.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED))
            assert manager.remote_log_segment_metadata(t, 1, start + 50) is None
            await manager.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
            assert m.remote_log_segment_id not in {
                s.remote_log_segment_id for s in manager.list_remote_log_segments(t)
            }
    delete = RemotePartitionDeleteMetadata(
        tps[3], RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 0
    )
    await manager.put_remote_partition_delete_metadata(delete)
    assert manager.remote_partition_delete_state(tps[3]) == delete
    assert manager.stats.skipped_invalid == 0 and manager.stats.skipped_undecodable == 0

    # The log holds exactly what a full, independent replay turns into the same state.
    records = await read_topic(kafka_bootstrap, topic, N)
    assert digest(replay(records).fingerprint(tps)) == digest(manager.fingerprint(tps))


async def test_independent_reader_sees_kafka_layout(
    kafka_bootstrap: str, managers: list[TopicBasedRemoteLogMetadataManager]
) -> None:
    """Interop: what Kafka's own RLMM (or any Kafka client) would read from the topic."""
    topic = new_topic()
    tps = [tp(i) for i in range(6)] + [tp(0, topic="bar", topic_id=uuid4())]
    manager = await open_manager(managers, kafka_bootstrap, topic, tps)
    written: dict[int, list[RemoteLogMetadata]] = {p: [] for p in range(N)}
    rng = random.Random(11)
    for i in range(30):
        t = rng.choice(tps)
        m = segment(t, i * 10, i * 10 + 9, {0: i * 10}, txn_index_empty=i % 2 == 0)
        for event in await lifecycle(manager, m):
            written[metadata_partition_for(t, N)].append(event)
    delete = RemotePartitionDeleteMetadata(
        tps[-1], RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 3, 1
    )
    await manager.put_remote_partition_delete_metadata(delete)
    written[metadata_partition_for(tps[-1], N)].append(delete)

    records = await read_topic(kafka_bootstrap, topic, N)
    assert sum(len(r) for r in records.values()) == sum(len(w) for w in written.values())
    for p, raw in records.items():
        assert [r.offset for r in raw] == list(range(len(raw))), f"partition {p}: not dense"
        assert all(r.key is None for r in raw), f"partition {p}: Kafka's RLMM uses null keys"
        # Byte-exact, in the order written, on Kafka's partition for each event.
        assert [r.value for r in raw] == [encode(e) for e in written[p]], f"partition {p}"
        for r in raw:
            event = decode(r.value)
            assert metadata_partition_for(event.topic_id_partition, N) == p
    assert sum(1 for w in written.values() if w) >= 3, "the workload should span partitions"


async def test_restart_resumes_from_snapshot_and_replays_only_the_tail(
    kafka_bootstrap: str, managers: list[TopicBasedRemoteLogMetadataManager], tmp_path: Path
) -> None:
    topic = new_topic()
    tps = [tp(i) for i in range(5)]
    policy = SnapshotPolicy(tmp_path / "snapshots", every_events=30, interval_s=3600)
    first = await open_manager(managers, kafka_bootstrap, topic, tps, snapshot_policy=policy)
    for i in range(60):
        await lifecycle(first, segment(tps[i % 5], i * 10, i * 10 + 9, {0: i * 10}))
    await first.close()  # clean shutdown: a final snapshot at the applied offsets
    snap = SnapshotStore(policy.directory).load_latest()
    assert snap is not None and sum(o + 1 for o in snap.applied_offsets.values()) == 120

    # While it is down, another instance (the new leader) writes more.
    other = await open_manager(managers, kafka_bootstrap, topic, tps)
    tail = 0
    for i in range(60, 75):
        tail += len(await lifecycle(other, segment(tps[i % 5], i * 10, i * 10 + 9, {0: i * 10})))

    again = await open_manager(managers, kafka_bootstrap, topic, tps, snapshot_policy=policy)
    assert again.stats.restored_from_snapshot
    assert again.stats.full_replays == 0
    # Only the events written after the snapshot were read and applied.
    assert again.stats.applied_events + again.stats.skipped_invalid == tail
    records = await read_topic(kafka_bootstrap, topic, N)
    assert sum(len(r) for r in records.values()) == 120 + tail
    assert digest(again.fingerprint(tps)) == digest(replay(records).fingerprint(tps))
    assert again.fingerprint(tps) == other.fingerprint(tps)
    # And it is a working manager: read-your-writes on the restored state.
    m = segment(tps[0], 10_000, 10_009, {0: 10_000})
    await lifecycle(again, m)
    assert again.remote_log_segment_metadata(tps[0], 0, 10_005) is not None
