"""NotReadyRlmm fails closed; SwappableRlmm swaps atomically under concurrent calls; both,
and the manager, implement the OffloadMetadataManager interface (Kafka's
RemoteLogMetadataManager and the offloader's calls) method by method."""

from __future__ import annotations

import asyncio

import pytest

from eventlog.memory import MemoryEventLog
from rlmm.base import RemoteLogMetadataManager
from rlmm.errors import RemoteStorageNotReadyError
from rlmm.facade import NotReadyRlmm, SwappableRlmm
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemotePartitionDeleteMetadata, RemotePartitionDeleteState
from rlmm.offload_metadata import OffloadMetadataManager
from tests.rlmm.factories import S, segment, tp, update

TP0 = tp(0)


async def test_not_ready_fails_every_call_retriably() -> None:
    manager = NotReadyRlmm()
    for call in (
        lambda: manager.remote_log_segment_metadata(TP0, 0, 0),
        lambda: manager.highest_offset_for_epoch(TP0, 0),
        lambda: manager.list_remote_log_segments(TP0),
        lambda: manager.remote_log_size(TP0, 0),
        lambda: manager.next_segment_with_txn_index(TP0, 0, 0),
        lambda: manager.remote_partition_delete_state(TP0),
        lambda: manager.walk_remote_log_segments(TP0, unsigned_only=True),
        lambda: manager.walk_segment_summaries(TP0),
        lambda: manager.remote_log_segment_count(TP0),
        lambda: manager.oldest_max_timestamp_ms(TP0),
        lambda: manager.contiguous_end_offset(TP0, frozenset({S.COPY_SEGMENT_FINISHED})),
    ):
        with pytest.raises(RemoteStorageNotReadyError) as err:
            call()
        assert err.value.retriable
    m = segment(TP0, 0, 1, {0: 0})
    delete = RemotePartitionDeleteMetadata(
        TP0, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 0
    )
    for write in (
        lambda: manager.add_remote_log_segment_metadata(m),
        lambda: manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED)),
        lambda: manager.put_remote_partition_delete_metadata(delete),
        lambda: manager.on_partition_leadership_changes([TP0], []),
        lambda: manager.on_stop_partitions([TP0]),
        lambda: manager.wait_until_ready([TP0], 5),
    ):
        with pytest.raises(RemoteStorageNotReadyError) as err:
            await write()
        assert err.value.retriable
    # what it applies and serves: nothing (the offloader reads these without a guard)
    assert manager.is_ready(TP0) is False
    assert manager.applied_offsets == {} and manager.applied_offset_of(TP0) is None
    assert manager.assigned_partitions == set()
    with pytest.raises(AttributeError):
        manager.no_such_method  # noqa: B018


async def test_swappable_starts_closed_then_serves_the_real_manager() -> None:
    facade = SwappableRlmm()
    with pytest.raises(RemoteStorageNotReadyError):
        facade.list_remote_log_segments(TP0)
    log = MemoryEventLog(3)
    manager = TopicBasedRemoteLogMetadataManager(log)
    await manager.start()
    await manager.on_partition_leadership_changes([TP0], [])
    await manager.wait_until_ready([TP0], 5)
    old = facade.swap(manager)
    assert isinstance(old, NotReadyRlmm)
    m = segment(TP0, 0, 10, {0: 0})
    await facade.add_remote_log_segment_metadata(m)
    await facade.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    assert facade.remote_log_segment_metadata(TP0, 0, 5) is not None
    assert facade.is_ready(TP0)
    await facade.close()
    await log.close()


async def test_concurrent_calls_during_swaps_never_fail_for_the_swap() -> None:
    logs = [MemoryEventLog(3) for _ in range(2)]
    managers = []
    for log in logs:
        m = TopicBasedRemoteLogMetadataManager(log)
        await m.start()
        await m.on_partition_leadership_changes([TP0], [])
        await m.wait_until_ready([TP0], 5)
        # each target answers differently so a mixed call would be visible
        seg = segment(TP0, 0, 10 if not managers else 20, {0: 0})
        await m.add_remote_log_segment_metadata(seg)
        managers.append(m)
    facade = SwappableRlmm(managers[0])
    answers: set[int] = set()
    stop = False

    async def reader() -> None:
        while not stop:
            segs = facade.list_remote_log_segments(TP0)
            assert len(segs) == 1
            answers.add(segs[0].end_offset)
            await asyncio.sleep(0)

    async def swapper() -> None:
        for i in range(200):
            facade.swap(managers[i % 2])
            await asyncio.sleep(0)

    readers = [asyncio.create_task(reader()) for _ in range(8)]
    await swapper()
    stop = True
    await asyncio.gather(*readers)
    assert answers == {10, 20}
    for m in managers:
        await m.close()
    for log in logs:
        await log.close()


def test_every_implementation_defines_every_call_of_the_interface() -> None:
    """No name dispatch: each call is a typed method of the class itself, Kafka's and the
    offloader's."""
    calls = OffloadMetadataManager.__abstractmethods__
    assert RemoteLogMetadataManager.__abstractmethods__ < calls
    assert {"remote_log_segment_metadata", "close", "walk_segment_summaries"} <= calls
    for cls in (NotReadyRlmm, SwappableRlmm, TopicBasedRemoteLogMetadataManager):
        assert issubclass(cls, OffloadMetadataManager)
        assert not cls.__abstractmethods__
        assert not hasattr(cls, "__getattr__")
        missing = {name for name in calls if name not in vars(cls)}
        assert not missing, f"{cls.__name__} inherits {sorted(missing)}"


async def test_a_write_goes_to_the_target_of_when_it_was_called() -> None:
    first, second = MemoryEventLog(3), MemoryEventLog(3)
    managers = [TopicBasedRemoteLogMetadataManager(log) for log in (first, second)]
    for m in managers:
        await m.start()
        await m.on_partition_leadership_changes([TP0], [])
        await m.wait_until_ready([TP0], 5)
    facade = SwappableRlmm(managers[0])
    write = facade.add_remote_log_segment_metadata(segment(TP0, 0, 10, {0: 0}))
    facade.swap(managers[1])
    await write
    assert [len(m.list_remote_log_segments(TP0)) for m in managers] == [1, 0]
    for m in managers:
        await m.close()


async def test_the_offloader_s_calls_go_to_the_target_of_when_they_were_made() -> None:
    """Through the facade the offloader's calls answer as the target's own: a walk walks
    the segments of the target it was made on, even when a swap comes mid-walk."""
    logs = [MemoryEventLog(3), MemoryEventLog(3)]
    managers = [TopicBasedRemoteLogMetadataManager(log) for log in logs]
    facade = SwappableRlmm()
    await facade.start()  # NotReadyRlmm's start does nothing; waiting on it fails closed
    with pytest.raises(RemoteStorageNotReadyError):
        await facade.wait_until_ready([TP0], 5)
    for i, m in enumerate(managers):
        facade.swap(m)
        await facade.start()
        await facade.on_partition_leadership_changes([TP0], [])
        await facade.wait_until_ready([TP0], 5)
        for start in range(0, 10 * (i + 2), 10):  # 2 segments in the first, 3 in the second
            seg = segment(TP0, start, start + 9, {0: 0})
            await facade.add_remote_log_segment_metadata(seg)
            await facade.update_remote_log_segment_metadata(update(seg, S.COPY_SEGMENT_FINISHED))
    first, second = managers
    finished = frozenset({S.COPY_SEGMENT_FINISHED})
    assert facade.assigned_partitions == {TP0}
    assert facade.applied_offsets == second.applied_offsets
    assert facade.applied_offset_of(TP0) == second.applied_offset_of(TP0)
    assert facade.remote_log_segment_count(TP0, finished) == 3
    assert facade.contiguous_end_offset(TP0, finished) == 29
    assert facade.oldest_max_timestamp_ms(TP0) == second.oldest_max_timestamp_ms(TP0)
    walk = facade.walk_segment_summaries(TP0, finished)
    segments = facade.walk_remote_log_segments(TP0, unsigned_only=True)
    facade.swap(first)
    assert [s.end_offset for s in walk] == [9, 19, 29]
    assert [m.end_offset for m in segments] == [9, 19, 29]  # uuid4 ids: none signed
    assert facade.contiguous_end_offset(TP0, finished) == 19
    facade.swap(NotReadyRlmm())
    with pytest.raises(RemoteStorageNotReadyError):
        facade.walk_segment_summaries(TP0)
    assert facade.applied_offset_of(TP0) is None and facade.assigned_partitions == set()
    for m in managers:
        await m.close()
