"""Leadership: the node id from the log dirs, and which partitions a sidecar leads."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from rlmm.offload import EpochStart, RemoteLogManager
from rlmm.offload.cluster import NO_LEADER, ClusterView, PartitionLeadership
from rlmm.offload.errors import LeadershipError, LogDirError
from rlmm.offload.expiry import off_lineage
from rlmm.offload.leadership import assign, check_node_id, lead_all, lost, read_node_id
from tests.rlmm.offload.conftest import KEEP_ALL, S, source, write_partition
from tests.rlmm.offload.test_expire_and_cleanup import GatedRsm


def test_node_id_comes_from_meta_properties(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert read_node_id([a, b]) is None
    (a / "meta.properties").write_text(
        "#\n#Wed\nnode.id=2\nversion=1\ncluster.id=abc\ndirectory.id=xyz\n"
    )
    assert read_node_id([a, b]) == 2
    (b / "meta.properties").write_text("node.id=3\nversion=1\n")
    with pytest.raises(LogDirError, match="different brokers"):
        read_node_id([a, b])
    (b / "meta.properties").write_text("node.id=x\n")
    with pytest.raises(LogDirError, match="not a number"):
        read_node_id([b])


def test_a_configured_broker_id_that_differs_is_refused() -> None:
    assert check_node_id(2, None) == 2
    assert check_node_id(2, 2) == 2
    assert check_node_id(None, 5) == 5
    assert check_node_id(None, None) == 0
    with pytest.raises(LeadershipError, match=r"broker_id = 1 is configured.*node 2"):
        check_node_id(2, 1)


def _view(
    states: dict[tuple[str, int], PartitionLeadership], tiered: frozenset[str] = frozenset()
) -> ClusterView:
    return ClusterView(states, tiered, frozenset({1, 2, 3}))


def test_assign_leads_only_what_the_cluster_gives_at_a_reached_epoch(tmp_path: Path) -> None:
    # epochs (0, 2): the log dir's checkpoint has reached epoch 2
    sources = [source(write_partition(tmp_path, "orders", p, records=100)) for p in range(4)]
    sources.append(source(write_partition(tmp_path, "kt", 0, records=100)))
    states = {
        ("orders", 0): PartitionLeadership(1, 2, (1, 2, 3), (1, 2, 3)),  # led
        ("orders", 1): PartitionLeadership(2, 5, (1, 2, 3), (2, 3)),  # another leader
        ("orders", 2): PartitionLeadership(1, 3, (1, 2, 3), (1, 2, 3)),  # epoch not reached
        ("orders", 3): PartitionLeadership(NO_LEADER, 4, (1, 2, 3), ()),  # no leader
        ("kt", 0): PartitionLeadership(1, 2, (1,), (1,)),
    }
    out = assign(sources, _view(states, frozenset({"kt"})), node_id=1)
    tps = {s.topic_id_partition.partition: s.topic_id_partition for s in sources[:4]}
    assert [s.topic_id_partition for s in out.lead] == [tps[0]]
    assert out.epochs == {tps[0]: 2}
    assert set(out.follow) == {tps[1], tps[3]}
    assert list(out.waiting) == [tps[2]] and "epoch 3" in out.waiting[tps[2]]
    assert out.kafka_tiered == {"kt"}
    assert set(out.replicated) == set(tps.values())
    assert [s.topic_id_partition for s in lead_all(sources).lead] == [
        s.topic_id_partition for s in sources
    ]
    # leadership moved, or came back at a newer epoch: lost
    moved = {("orders", 0): PartitionLeadership(2, 3, (1, 2, 3), (2, 3))}
    assert lost({tps[0]: 2}, _view(moved), 1) == [tps[0]]
    again = {("orders", 0): PartitionLeadership(1, 4, (1, 2, 3), (1, 2, 3))}
    assert lost({tps[0]: 2}, _view(again), 1) == [tps[0]]
    assert lost({tps[0]: 2}, _view(states), 1) == []


TP = TopicIdPartition(uuid.uuid4(), "t", 0)


def _seg(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(TP), start, end, 0, 1, 0, 10, epochs
    )


def test_off_lineage_follows_kafkas_rule_where_a_leader_can_judge() -> None:
    # the new leader's lineage: epoch 1 from 0, epoch 3 from 120 (it never had epoch 2)
    lineage = [EpochStart(1, 0), EpochStart(3, 120)]
    assert not off_lineage(_seg(0, 99, {1: 0}), lineage, 500)
    assert off_lineage(_seg(100, 200, {1: 100}), lineage, 500)  # epoch 1 past its end
    assert off_lineage(_seg(100, 119, {2: 100}), lineage, 500)  # an epoch it skipped
    assert not off_lineage(_seg(120, 300, {3: 120}), lineage, 500)
    assert off_lineage(_seg(110, 300, {1: 110, 2: 115, 3: 120}), lineage, 500)
    # the newest epoch's end is not judged (the log end may be read short)
    assert not off_lineage(_seg(120, 900, {3: 120}), lineage, 500)
    # an epoch newer than the leader's: its view is behind, nothing is said
    assert not off_lineage(_seg(100, 200, {1: 100, 4: 150}), lineage, 500)
    # below the earliest local epoch (local retention dropped it): not judged
    assert not off_lineage(_seg(0, 50, {0: 0}), [EpochStart(1, 60)], 500)
    # the earliest epoch's start moves with local retention: not judged either
    assert not off_lineage(_seg(0, 50, {1: 0}), [EpochStart(1, 40), EpochStart(3, 120)], 500)


async def test_leadership_lost_mid_copy_abandons_it_and_deletes_its_objects(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """As Kafka's RemoteLogManager cancels its task: the copy held mid-upload is
    abandoned, its objects deleted and its metadata finished as deleted; the round says
    abandoned (not an error), no copy or delete error is counted (the copy-errors alert
    must not fire for leadership moving), and no later segment starts."""
    gated = GatedRsm(tmp_path / "remote")
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir, KEEP_ALL)
    tp = src.topic_id_partition
    rlm = make_rlm(store=gated)
    await rlm.on_leadership_changes([src], start_tasks=False)
    round_ = asyncio.create_task(rlm.run_round())
    assert await asyncio.to_thread(gated.entered.wait, 30)
    abandon = asyncio.create_task(rlm.abandon([tp]))
    await asyncio.sleep(0.2)
    gated.gate.set()  # the upload in its thread finishes; its objects must still go
    await abandon
    results = await round_
    copied, _expired = results[tp]
    assert copied.abandoned and copied.error is None and copied.copied == []
    assert tp not in rlm.leaders and tp in rlm.followers
    states = [m.state for m in rlmm_manager.list_remote_log_segments(tp)]
    assert states == [] or set(states) == {S.DELETE_SEGMENT_FINISHED}
    assert list(gated.list_objects(tp)) == []
    assert rlm.metrics.copy_requests.labels(tp.topic)._value.get() == 1
    assert rlm.metrics.copy_errors.labels(tp.topic)._value.get() == 0
    assert rlm.metrics.delete_errors.labels(tp.topic)._value.get() == 0
    gated.close()


async def test_a_cancelled_abandon_is_not_swallowed(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """The sidecar's leadership poll is cancelled at the end of each round, possibly while
    it waits in abandon() for a copy to clean up: that cancellation must reach the poll
    (it once was swallowed there, and the sidecar waited for the poll forever)."""
    gated = GatedRsm(tmp_path / "remote")
    src = source(write_partition(tmp_path, "orders", 0), KEEP_ALL)
    rlm = make_rlm(store=gated)
    await rlm.on_leadership_changes([src], start_tasks=False)
    round_ = asyncio.create_task(rlm.run_round())
    assert await asyncio.to_thread(gated.entered.wait, 30)
    abandon = asyncio.create_task(rlm.abandon([src.topic_id_partition]))
    await asyncio.sleep(0.2)
    abandon.cancel()
    await asyncio.sleep(0.2)
    gated.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(abandon, 30)
    await asyncio.wait_for(round_, 30)
    gated.close()


async def test_a_missing_finished_copy_is_copied_again_and_young_foreign_leftovers_wait(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """The race a replicated soak found: a new leader's cleanup deleted an old leader's
    copy that had just finished, and the highest remote offset (which only grows, as in
    Kafka) kept the copy from ever coming back. Now another broker's young leftover
    waits out the grace, and a hole below the highest offset is copied again."""
    from rlmm.model import RemoteLogSegmentMetadata, new_rlmm_segment_id

    clock = [1_700_000_000_000]
    src = source(write_partition(tmp_path, "orders", 0), KEEP_ALL)
    tp = src.topic_id_partition
    rlm = make_rlm(clock_ms=lambda: clock[0], leftover_grace_s=60, broker_id=1)
    await rlm.on_leadership_changes([src], start_tasks=False)
    copied = (await rlm.copy_round(tp)).copied
    assert len(copied) >= 3
    # another broker's copy in flight (young): left alone
    theirs = RemoteLogSegmentMetadata(
        new_rlmm_segment_id(tp), 9000, 9100, 0, 2, clock[0] - 1000, 10, {2: 9000}
    )
    await rlmm_manager.add_remote_log_segment_metadata(theirs)
    await rlm.expire_round(tp)
    assert theirs.remote_log_segment_id in {
        m.remote_log_segment_id for m in rlmm_manager.list_remote_log_segments(tp)
    }
    clock[0] += 61_000  # older than the grace: the current leader cleans it up
    assert (await rlm.expire_round(tp)).cleaned == 1
    # a finished copy in the middle deleted (as by a cleanup that raced its FINISHED)
    middle = copied[1]
    await rlm._ops.delete(middle)
    again = (await rlm.copy_round(tp)).copied
    assert [m.start_offset for m in again][:1] == [middle.start_offset]
    segments = rlmm_manager.list_remote_log_segments(tp)
    live = sorted(
        (m for m in segments if m.state == S.COPY_SEGMENT_FINISHED), key=lambda m: m.start_offset
    )
    end = live[0].end_offset
    for m in live[1:]:
        assert m.start_offset <= end + 1, "a hole is left"
        end = max(end, m.end_offset)
    assert (await rlm.copy_round(tp)).copied == []  # healed: nothing more to copy
