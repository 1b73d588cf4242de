"""TopicBasedRemoteLogMetadataManager over a real event log (memory backend).

Ports the scenarios of Kafka's TopicBasedRemoteLogMetadataManager tests (multiple
subscriptions, restart, remote log size per epoch) plus our read-your-writes,
fail-closed and apply-loop-survival guarantees.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator

import pytest

from eventlog.memory import MemoryEventLog
from rlmm.codec import encode
from rlmm.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    RemoteStorageTimeoutError,
)
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    kafka_uuid_to_str,
)
from rlmm.partitioning import metadata_partition_for
from tests.rlmm.factories import S, segment, tp, update
from tests.rlmm.helpers import GatedEventLog, sequential_replay

N = 5
TP0 = tp(0)


@pytest.fixture
async def log() -> AsyncIterator[MemoryEventLog]:
    event_log = MemoryEventLog(N)
    yield event_log
    await event_log.close()


async def new_manager(
    log: MemoryEventLog | GatedEventLog, *tps: TopicIdPartition, **kwargs: object
) -> TopicBasedRemoteLogMetadataManager:
    # The fixture's log outlives its managers (restarts over the same log): shared.
    kwargs.setdefault("close_event_log", False)
    manager = TopicBasedRemoteLogMetadataManager(log, **kwargs)  # type: ignore[arg-type]
    await manager.start()
    if tps:
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 10)
    return manager


async def copy(
    manager: TopicBasedRemoteLogMetadataManager, m: RemoteLogSegmentMetadata
) -> RemoteLogSegmentMetadata:
    await manager.add_remote_log_segment_metadata(m)
    await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    return m


async def test_read_your_writes(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    m = segment(TP0, 0, 100, {0: 0})
    await manager.add_remote_log_segment_metadata(m)
    # visible immediately after the await: listed, not yet served
    assert [s.remote_log_segment_id for s in manager.list_remote_log_segments(TP0)] == [
        m.remote_log_segment_id
    ]
    assert manager.remote_log_segment_metadata(TP0, 0, 50) is None
    await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    got = manager.remote_log_segment_metadata(TP0, 0, 50)
    assert got is not None and got.state == S.COPY_SEGMENT_FINISHED
    assert manager.highest_offset_for_epoch(TP0, 0) == 100
    await manager.close()


async def test_invalid_writes_publish_nothing(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    p = metadata_partition_for(TP0, N)
    m = segment(TP0, 0, 100, {0: 0})
    with pytest.raises(
        RemoteResourceNotFoundError, match=kafka_uuid_to_str(m.remote_log_segment_id.id)
    ):
        await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    await manager.add_remote_log_segment_metadata(m)
    finished = RemoteLogSegmentMetadata(
        **{f: getattr(m, f) for f in m.__dataclass_fields__} | {"state": S.COPY_SEGMENT_FINISHED}
    )
    with pytest.raises(InvalidStateTransitionError):
        await manager.add_remote_log_segment_metadata(finished)
    with pytest.raises(InvalidStateTransitionError, match="already exists"):
        await manager.add_remote_log_segment_metadata(m)
    with pytest.raises(InvalidStateTransitionError, match="-> DELETE_SEGMENT_FINISHED"):
        await manager.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
    with pytest.raises(InvalidStateTransitionError, match="DELETE_PARTITION_FINISHED"):
        await manager.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(
                TP0, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 1, 0
            )
        )
    assert (await log.end_offsets([p]))[p] == 1  # only the one valid add
    assert manager.stats.skipped_invalid == 0
    await manager.close()


async def test_unassigned_and_not_ready(log: MemoryEventLog) -> None:
    gated = GatedEventLog(log)
    manager = await new_manager(gated)
    with pytest.raises(RemoteResourceNotFoundError, match="not assigned"):
        manager.list_remote_log_segments(TP0)
    await log.append(metadata_partition_for(TP0, N), encode(segment(TP0, 0, 9, {0: 0})))
    await manager.on_partition_leadership_changes([], [TP0])
    assert not manager.is_ready(TP0)
    with pytest.raises(RemoteStorageNotReadyError) as err:
        manager.remote_log_segment_metadata(TP0, 0, 0)
    assert err.value.retriable and str(TP0) in str(err.value)
    with pytest.raises(RemoteStorageNotReadyError):
        await manager.add_remote_log_segment_metadata(segment(TP0, 10, 19, {0: 10}))
    gated.gate.set()
    await manager.wait_until_ready([TP0], 10)
    assert manager.is_ready(TP0)
    assert len(manager.list_remote_log_segments(TP0)) == 1
    await manager.close()


async def test_write_times_out_when_not_applied(log: MemoryEventLog) -> None:
    gated = GatedEventLog(log)
    gated.gate.set()
    manager = await new_manager(gated, TP0, write_timeout_s=0.2)
    gated.gate.clear()
    # restart the apply loop behind a closed gate by re-assigning
    await manager.on_stop_partitions([TP0])
    await manager.on_partition_leadership_changes([TP0], [])
    with pytest.raises(RemoteStorageTimeoutError, match="offset 0 but not applied"):
        await manager.add_remote_log_segment_metadata(segment(TP0, 0, 9, {0: 0}))
    gated.gate.set()
    await manager.close()


async def test_apply_loop_survives_garbage_and_illegal_events(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    p = metadata_partition_for(TP0, N)
    m = segment(TP0, 0, 100, {0: 0})
    await log.append(p, b"\x01\x07garbage")  # unknown apiKey
    await log.append(p, b"")  # empty record
    await log.append(p, encode(update(m, S.COPY_SEGMENT_FINISHED)))  # unknown segment
    await copy(manager, m)
    await log.append(p, encode(update(m, S.DELETE_SEGMENT_FINISHED)))
    m2 = await copy(manager, segment(TP0, 101, 200, {0: 101}))
    assert manager.stats.skipped_undecodable == 2
    assert manager.stats.skipped_invalid == 2
    assert manager.remote_log_segment_metadata(TP0, 0, 150).remote_log_segment_id == (  # type: ignore[union-attr]
        m2.remote_log_segment_id
    )
    assert any("offset 0" in e for e in manager.stats.last_errors)
    await manager.close()


async def test_conflicting_concurrent_writers_one_wins(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    m = segment(TP0, 0, 100, {0: 0})
    await manager.add_remote_log_segment_metadata(m)
    results = await asyncio.gather(
        manager.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED)),
        manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED)),
        return_exceptions=True,
    )
    # both passed validation; the apply loop decides, and the loser is told
    assert results[0] is None
    assert isinstance(results[1], InvalidStateTransitionError)
    assert manager.list_remote_log_segments(TP0)[0].state == S.DELETE_SEGMENT_STARTED
    await manager.close()


async def test_two_managers_converge(log: MemoryEventLog) -> None:
    tps = [tp(i) for i in range(6)]
    a = await new_manager(log, *tps)
    b = await new_manager(log, *tps)
    rng = random.Random(3)
    for i in range(60):
        t = rng.choice(tps)
        writer = a if i % 2 else b
        await copy(writer, segment(t, i * 100, i * 100 + 99, {i // 10: i * 100}))
    await a.wait_until_ready(tps, 5)
    await asyncio.sleep(0)
    for _ in range(100):  # b applies asynchronously: wait for it to catch up
        if a.applied_offsets == b.applied_offsets:
            break
        await asyncio.sleep(0.01)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() == (await sequential_replay(log)).fingerprint()
    await a.close()
    await b.close()


async def test_multiple_subscriptions(log: MemoryEventLog) -> None:
    # Kafka's MultipleSubscriptionsTest: two partitions on different metadata partitions
    leader = tp(0, topic="leader")
    follower = tp(0, topic="follower", topic_id=uuid.uuid4())
    while metadata_partition_for(follower, N) == metadata_partition_for(leader, N):
        follower = tp(0, topic="follower", topic_id=uuid.uuid4())
    manager = await new_manager(log, leader)
    await copy(manager, segment(leader, 0, 100, {0: 0}))
    with pytest.raises(RemoteResourceNotFoundError):
        await manager.add_remote_log_segment_metadata(segment(follower, 0, 100, {0: 0}))
    other = await new_manager(log, follower)
    await copy(other, segment(follower, 0, 100, {0: 0}))
    await manager.on_partition_leadership_changes([leader], [follower])
    await manager.wait_until_ready([follower], 5)
    assert len(manager.list_remote_log_segments(follower)) == 1
    assert len(manager.list_remote_log_segments(leader)) == 1
    await manager.close()
    await other.close()


async def test_restart_replays_log(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    for i in range(10):
        await copy(manager, segment(TP0, i * 10, i * 10 + 9, {0: i * 10}))
    before = manager.fingerprint()
    await manager.close()
    restarted = await new_manager(log, TP0)
    assert restarted.fingerprint() == before
    assert len(restarted.list_remote_log_segments(TP0)) == 10
    await restarted.close()


async def test_reassign_after_stop_replays_without_duplicates(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    segs = [await copy(manager, segment(TP0, i * 10, i * 10 + 9, {0: i * 10})) for i in range(5)]
    before = manager.fingerprint()
    await manager.on_stop_partitions([TP0])
    with pytest.raises(RemoteResourceNotFoundError):
        manager.list_remote_log_segments(TP0)
    assert not manager.is_ready(TP0)
    await manager.on_partition_leadership_changes([TP0], [])
    await manager.wait_until_ready([TP0], 5)
    assert manager.fingerprint() == before
    assert len(manager.list_remote_log_segments(TP0)) == len(segs)
    await manager.close()


async def test_remote_log_size_per_epoch(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    await copy(manager, segment(TP0, 0, 100, {0: 0, 1: 20, 2: 80}, size=100))
    await copy(manager, segment(TP0, 101, 200, {2: 101}, size=200))
    s2 = segment(TP0, 201, 300, {2: 201, 3: 240}, size=300)
    await manager.add_remote_log_segment_metadata(s2)  # in progress still counts
    assert manager.remote_log_size(TP0, 0) == 100
    assert manager.remote_log_size(TP0, 2) == 600
    assert manager.remote_log_size(TP0, 3) == 300
    assert manager.remote_log_size(TP0, 9) == 0  # unknown epoch
    assert manager.remote_log_size(TP0) == 600
    # the count the sidecar's gauge takes, without making the segments
    assert manager.remote_log_segment_count(TP0) == len(manager.list_remote_log_segments(TP0)) == 3
    first = manager.list_remote_log_segments(TP0)[0]
    for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        await manager.update_remote_log_segment_metadata(update(first, state))
    assert manager.remote_log_segment_count(TP0) == len(manager.list_remote_log_segments(TP0)) == 2
    await manager.close()


async def test_partition_delete_lifecycle(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    await copy(manager, segment(TP0, 0, 100, {0: 0}))
    P = RemotePartitionDeleteState
    for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
        await manager.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(TP0, state, 5, 0)
        )
        assert manager.remote_partition_delete_state(TP0).state == state  # type: ignore[union-attr]
        assert len(manager.list_remote_log_segments(TP0)) == 1
    await manager.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(TP0, P.DELETE_PARTITION_FINISHED, 6, 0)
    )
    with pytest.raises(RemoteResourceNotFoundError, match="deleted"):
        manager.list_remote_log_segments(TP0)
    with pytest.raises(InvalidStateTransitionError, match="deleted"):
        await manager.add_remote_log_segment_metadata(segment(TP0, 200, 300, {0: 200}))
    await manager.close()


async def test_closed_manager_refuses_calls(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    await manager.close()
    await manager.close()  # idempotent
    with pytest.raises(RemoteStorageError, match="closed"):
        await manager.add_remote_log_segment_metadata(segment(TP0, 0, 1, {0: 0}))


async def test_64_writers_1000_partitions_equal_sequential_replay(log: MemoryEventLog) -> None:
    tps = [tp(i, topic="big") for i in range(1000)]
    manager = await new_manager(log, *tps)
    queue: asyncio.Queue[TopicIdPartition] = asyncio.Queue()
    for t in tps:
        queue.put_nowait(t)

    async def writer(seed: int) -> None:
        rng = random.Random(seed)
        while not queue.empty():
            t = queue.get_nowait()
            segs = [segment(t, i * 10, i * 10 + 9, {0: i * 10}) for i in range(2)]
            for s in segs:
                await copy(manager, s)
            if rng.random() < 0.3:
                await manager.update_remote_log_segment_metadata(
                    update(segs[0], S.DELETE_SEGMENT_STARTED)
                )

    await asyncio.gather(*(writer(i) for i in range(64)))
    assert sum(len(manager.list_remote_log_segments(t)) for t in tps) == 2000
    assert manager.fingerprint() == (await sequential_replay(log)).fingerprint()
    assert manager.stats.skipped_invalid == 0
    await manager.close()


async def test_redelivered_events_are_not_failures(log: MemoryEventLog) -> None:
    # A non-idempotent producer retrying after a lost ack stores a record twice; the
    # writer whose event took effect must not be told it failed.
    manager = await new_manager(log, TP0)
    p = metadata_partition_for(TP0, N)
    m = segment(TP0, 0, 100, {0: 0})
    await manager.add_remote_log_segment_metadata(m)
    await log.append(p, encode(m))  # the redelivered copy of the add
    await manager.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED))
    await manager.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
    await log.append(p, encode(update(m, S.DELETE_SEGMENT_FINISHED)))  # redelivered
    await copy(manager, segment(TP0, 101, 200, {0: 101}))  # a barrier: all applied
    assert manager.stats.skipped_duplicates == 2
    assert manager.stats.skipped_invalid == 0
    # a different segment content under an existing id is still refused
    clash = RemoteLogSegmentMetadata(
        **{f: getattr(m, f) for f in m.__dataclass_fields__} | {"end_offset": 999}
    )
    m2 = segment(TP0, 300, 400, {0: 300})
    await manager.add_remote_log_segment_metadata(m2)
    await log.append(
        p,
        encode(
            RemoteLogSegmentMetadata(
                **{f: getattr(m2, f) for f in m2.__dataclass_fields__} | {"end_offset": 999}
            )
        ),
    )
    await copy(manager, segment(TP0, 401, 500, {0: 401}))
    assert manager.stats.skipped_invalid == 1
    assert clash.end_offset == 999
    await manager.close()


async def test_event_log_failures_surface_as_remote_storage_errors(log: MemoryEventLog) -> None:
    manager = await new_manager(log, TP0)
    await log.close()  # the transport is gone
    with pytest.raises(RemoteStorageError, match="metadata partition") as err:
        await manager.add_remote_log_segment_metadata(segment(TP0, 0, 1, {0: 0}))
    assert err.value.__cause__ is not None
    await manager.close()
