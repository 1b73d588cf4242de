"""rlmm changes only what it wrote: signed segment ids, Kafka's segments left alone."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from remote.local import LocalRemoteStorageManager
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from rlmm.offload import RemoteLogManager, RetentionSettings
from rlmm.offload.errors import ForeignSegmentError
from rlmm.offload.ownership import Ownership, is_signed, new_segment_id
from tests.rlmm.offload.conftest import KEEP_ALL, S, source, write_partition

TP = TopicIdPartition(uuid.uuid4(), "orders", 0)


def test_signed_ids_are_recognised_and_random_ones_are_not() -> None:
    ids = [new_segment_id(TP) for _ in range(2000)]
    assert all(is_signed(i) for i in ids)
    assert len({i.id for i in ids}) == 2000
    assert all(i.id.version == 4 for i in ids)
    # Kafka's random ids (java.util.UUID.randomUUID, as uuid4) are not ours.
    assert sum(is_signed(RemoteLogSegmentId(TP, uuid.uuid4())) for _ in range(20000)) == 0


def _foreign(
    tp: TopicIdPartition, start: int, end: int, broker: int = 7
) -> RemoteLogSegmentMetadata:
    """A segment as Kafka's own RemoteLogManager publishes it (random id, objects elsewhere)."""
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), start, end, 1_700_000_000_000 + end, broker,
        1_700_000_000_000, 1000, {0: start},
    )  # fmt: skip


async def _publish(
    manager: TopicBasedRemoteLogMetadataManager, m: RemoteLogSegmentMetadata, finish: bool
) -> RemoteLogSegmentMetadata:
    await manager.add_remote_log_segment_metadata(m)
    if not finish:
        return m
    update = RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 1_700_000_000_001, None, S.COPY_SEGMENT_FINISHED, m.broker_id
    )
    await manager.update_remote_log_segment_metadata(update)
    return m.create_with_updates(update)


async def test_cleanup_expiry_and_partition_deletion_leave_foreign_segments_alone(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """Kafka's copy in flight (COPY_SEGMENT_STARTED) and its finished segments, in the
    same metadata: no cleanup, expiry or partition deletion writes an event for them."""
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir, RetentionSettings(retention_ms=1, retention_bytes=-1))
    tp = src.topic_id_partition
    await rlmm_manager.on_partition_leadership_changes([tp], [])
    await rlmm_manager.wait_until_ready([tp], 30)
    in_flight = await _publish(rlmm_manager, _foreign(tp, 5000, 5999), finish=False)
    finished = await _publish(rlmm_manager, _foreign(tp, 6000, 6999), finish=True)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)  # runs the crash cleanup
    expired = await rlm.expire_round(tp)
    assert expired.deleted == []
    states = {m.remote_log_segment_id: m.state for m in rlmm_manager.list_remote_log_segments(tp)}
    assert states == {
        in_flight.remote_log_segment_id: S.COPY_SEGMENT_STARTED,
        finished.remote_log_segment_id: S.COPY_SEGMENT_FINISHED,
    }
    assert [m.remote_log_segment_id for m in await rlm.foreign_segments(tp)] == [
        in_flight.remote_log_segment_id, finished.remote_log_segment_id,
    ]  # fmt: skip
    with pytest.raises(ForeignSegmentError, match="not written by rlmm"):
        await rlm.delete_partition(tp)
    assert rlmm_manager.remote_partition_delete_state(tp) is None
    with pytest.raises(ForeignSegmentError, match="rlmm did not write it"):
        await rlm._ops.delete(finished)


async def test_own_copies_are_signed_and_own_leftovers_still_cleaned(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """What rlmm copies carries its signature; its own STARTED leftover (a crash before
    any upload) is still cleaned up, and one of a release before signatures is known by
    its objects in rlmm's store."""
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir, KEEP_ALL)
    tp = src.topic_id_partition
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    copied = (await rlm.copy_round(tp)).copied
    assert copied and all(is_signed(m.remote_log_segment_id) for m in copied)
    # a crashed copy of ours: STARTED, signed, nothing uploaded
    crashed = RemoteLogSegmentMetadata(
        new_segment_id(tp), 9000, 9100, 1_700_000_009_100, 0, 1_700_000_000_000, 10, {2: 9000}
    )
    await rlmm_manager.add_remote_log_segment_metadata(crashed)
    # an older rlmm copy: unsigned id, but its objects are in rlmm's store
    legacy = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), copied[0].start_offset, copied[0].end_offset,
        copied[0].max_timestamp_ms, 0, 1_700_000_000_000, copied[0].segment_size_in_bytes,
        copied[0].segment_leader_epochs,
    )  # fmt: skip
    await rlmm_manager.add_remote_log_segment_metadata(legacy)
    rsm.copy_log_segment_data(legacy, src.describe(src.rolled_segments()[0]).data)
    ownership = Ownership(rsm)
    assert ownership.owns(legacy) and ownership.owns(crashed)
    assert not ownership.owns(_foreign(tp, 0, 10))
    assert await rlm.expire_round(tp)
    left = {m.remote_log_segment_id for m in rlmm_manager.list_remote_log_segments(tp)}
    assert crashed.remote_log_segment_id not in left
    assert legacy.remote_log_segment_id not in left
    assert not [o for o in rsm.list_objects(tp) if "9000" in o.name]


async def test_sidecar_never_touches_a_topic_whose_metadata_holds_foreign_segments(
    tmp_path: Path,
) -> None:
    """Without a view of the cluster's configs, a topic another writer tiers is known by
    its segments in the metadata that rlmm did not write: the sidecar copies, expires
    and cleans up nothing of it, says so once, and counts it; other topics go on."""
    from prometheus_client import generate_latest

    from rlmm.config import load_config
    from rlmm.factory import create_manager, open_event_log
    from rlmm.offload.display import Display
    from rlmm.offload.sidecar import Sidecar
    from tests.rlmm.offload.test_sidecar import write_config

    logs = tmp_path / "kafka-logs"
    theirs = write_partition(logs, "kafka-tiered", 0)
    ours = write_partition(logs, "orders", 0)
    path = write_config(tmp_path)
    config = load_config(path, env={})
    tp = theirs.topic_id_partition()
    manager = create_manager(config, open_event_log(config))
    await manager.start()
    try:
        await manager.on_partition_leadership_changes([tp], [])
        await manager.wait_until_ready([tp], 30)
        in_flight = await _publish(manager, _foreign(tp, 0, 99), finish=False)
        done = await _publish(manager, _foreign(tp, 100, 199), finish=True)
    finally:
        await manager.close()
    sidecar = Sidecar(config, [logs], once=True, display=Display(rich=False))
    report = await sidecar.run()
    assert report.tally.errors == []
    assert report.led == 1  # orders-0 only
    metrics = generate_latest(sidecar.metrics.registry).decode()
    assert 'rlmm_offload_topics_skipped{reason="foreign-segments"} 1.0' in metrics
    manager = create_manager(config, open_event_log(config))
    await manager.start()
    try:
        await manager.on_partition_leadership_changes([], [tp, ours.topic_id_partition()])
        await manager.wait_until_ready([tp, ours.topic_id_partition()], 30)
        states = {m.remote_log_segment_id: m.state for m in manager.list_remote_log_segments(tp)}
        assert states == {
            in_flight.remote_log_segment_id: S.COPY_SEGMENT_STARTED,
            done.remote_log_segment_id: S.COPY_SEGMENT_FINISHED,
        }
        assert manager.list_remote_log_segments(ours.topic_id_partition())
    finally:
        await manager.close()
