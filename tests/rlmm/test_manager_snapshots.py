"""Snapshot + tail replay: restarts rebuild exactly the state a full replay gives."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from eventlog.memory import MemoryEventLog
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for
from rlmm.snapshotting import SnapshotPolicy
from snapshot import SnapshotStore
from tests.rlmm.factories import S, segment, tp, update
from tests.rlmm.helpers import sequential_replay

N = 4


async def start(
    log: MemoryEventLog, directory: Path, tps: list[TopicIdPartition], every: int = 10_000
) -> TopicBasedRemoteLogMetadataManager:
    manager = TopicBasedRemoteLogMetadataManager(
        log,
        snapshot_policy=SnapshotPolicy(directory, every_events=every, interval_s=3600),
        close_event_log=False,  # the log outlives this manager (restarts over it)
    )
    await manager.start()
    await manager.on_partition_leadership_changes(tps, [])
    await manager.wait_until_ready(tps, 10)
    return manager


class Workload:
    """Random legal RLMM traffic over a few partitions."""

    def __init__(self, tps: list[TopicIdPartition], seed: int) -> None:
        self.rng = random.Random(seed)
        self.tps = tps
        self.live: list[RemoteLogSegmentMetadata] = []
        self.next_offset = dict.fromkeys(tps, 0)

    async def step(self, manager: TopicBasedRemoteLogMetadataManager) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.45 or not self.live:
            t = rng.choice(self.tps)
            start = self.next_offset[t]
            self.next_offset[t] = start + rng.randrange(1, 50)
            epoch = start // 200
            m = segment(
                t, start, self.next_offset[t] - 1, {epoch: start}, size=rng.randrange(1, 99)
            )
            await manager.add_remote_log_segment_metadata(m)
            self.live.append(m)
            return
        if choice < 0.97:
            m = rng.choice(self.live)
            current = next(
                (
                    s
                    for s in manager.list_remote_log_segments(m.topic_id_partition)
                    if s.remote_log_segment_id == m.remote_log_segment_id
                ),
                None,
            )
            if current is None:
                self.live.remove(m)
                return
            nxt = {
                S.COPY_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
                S.COPY_SEGMENT_FINISHED: [S.DELETE_SEGMENT_STARTED],
                S.DELETE_SEGMENT_STARTED: [S.DELETE_SEGMENT_FINISHED],
            }[current.state]
            await manager.update_remote_log_segment_metadata(update(m, rng.choice(nxt)))
            return
        t = rng.choice(self.tps)
        current_delete = manager.remote_partition_delete_state(t)
        if current_delete is None:
            await manager.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(
                    t, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 0
                )
            )


async def test_restart_loads_snapshot_and_replays_only_the_tail(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    tps = [tp(i) for i in range(8)]
    manager = await start(log, tmp_path, tps)
    work = Workload(tps, 1)
    for _ in range(200):
        await work.step(manager)
    await manager.close()  # clean shutdown writes a snapshot
    assert manager.stats.snapshots_written == 1
    tail = 30
    manager = await start(log, tmp_path, tps)
    for _ in range(tail):
        await work.step(manager)
    await manager.close()
    restarted = await start(log, tmp_path, tps)
    assert restarted.stats.restored_from_snapshot
    # after a clean close the snapshot covers everything: nothing is re-applied
    assert restarted.stats.applied_events == 0
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


async def test_periodic_snapshots_and_tail_replay(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    tps = [tp(i) for i in range(4)]
    manager = await start(log, tmp_path, tps, every=25)
    work = Workload(tps, 2)
    for i in range(120):
        await work.step(manager)
        if i % 30 == 29:  # let the in-flight snapshot finish so the next one can start
            await manager._snapshotter.wait_idle()  # type: ignore[union-attr]
    await manager._snapshotter.wait_idle()  # type: ignore[union-attr]
    assert manager.stats.snapshots_written >= 3
    # simulate a crash: no clean-shutdown snapshot, the process just goes away
    for task in manager._consumers.values():
        task.cancel()
    snap = SnapshotStore(tmp_path).load_latest()
    assert snap is not None
    total = sum((await log.end_offsets(range(N))).values())
    snapshotted = sum(o + 1 for o in snap.applied_offsets.values())
    restarted = await start(log, tmp_path, tps)
    assert restarted.stats.applied_events <= total - snapshotted
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


@pytest.mark.parametrize("seed", range(6))
async def test_restart_between_any_two_events_equals_full_replay(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = MemoryEventLog(N)
    tps = [tp(i) for i in range(5)]
    work = Workload(tps, seed)
    manager = await start(log, tmp_path, tps, every=rng.randrange(1, 20))
    for _ in range(150):
        await work.step(manager)
        if rng.random() < 0.1:
            if rng.random() < 0.5:
                await manager.close()  # clean: snapshot at the end
            else:  # crash: whatever the periodic snapshots left behind
                await manager._snapshotter.wait_idle()  # type: ignore[union-attr]
                for task in manager._consumers.values():
                    task.cancel()
            manager = await start(log, tmp_path, tps, every=rng.randrange(1, 20))
            assert manager.fingerprint() == (await sequential_replay(log)).fingerprint()
    await manager.close()


async def test_snapshot_ahead_of_log_falls_back_to_full_replay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tps = [tp(i) for i in range(4)]
    long_log = MemoryEventLog(N)
    manager = await start(long_log, tmp_path, tps)
    work = Workload(tps, 5)
    for _ in range(80):
        await work.step(manager)
    await manager.close()
    short_log = MemoryEventLog(N)  # e.g. the metadata log was lost and rebuilt shorter
    m2 = await start(short_log, tmp_path / "other", tps)
    work2 = Workload(tps, 6)
    for _ in range(10):
        await work2.step(m2)
    await m2.close()
    with caplog.at_level(logging.WARNING):
        restarted = await start(short_log, tmp_path, tps)
    assert restarted.stats.full_replays >= 1
    assert "replaying the partition from offset 0" in caplog.text
    assert restarted.fingerprint() == (await sequential_replay(short_log)).fingerprint()
    await restarted.close()


async def test_corrupt_snapshot_means_full_replay_not_failure(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    tps = [tp(i) for i in range(3)]
    manager = await start(log, tmp_path, tps)
    work = Workload(tps, 9)
    for _ in range(50):
        await work.step(manager)
    await manager.close()
    for path in SnapshotStore(tmp_path).paths():
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    restarted = await start(log, tmp_path, tps)
    assert not restarted.stats.restored_from_snapshot
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


async def test_two_brokers_snapshot_only_what_they_own(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    tps = [tp(i) for i in range(16)]
    owned = {0: [t for t in tps if metadata_partition_for(t, N) in (0, 1)]}
    owned[1] = [t for t in tps if t not in owned[0]]
    assert owned[0] and owned[1]
    managers = [await start(log, tmp_path / f"b{b}", owned[b]) for b in (0, 1)]
    for b in (0, 1):
        work = Workload(owned[b], b)
        for _ in range(60):
            await work.step(managers[b])
    for b in (0, 1):
        await managers[b].close()
        snap = SnapshotStore(tmp_path / f"b{b}").load_latest()
        assert snap is not None
        expected = {metadata_partition_for(t, N) for t in owned[b]}
        assert set(snap.applied_offsets) == expected
        restarted = await start(log, tmp_path / f"b{b}", owned[b])
        assert restarted.stats.applied_events == 0
        full = await sequential_replay(log, expected)
        assert restarted.fingerprint() == full.fingerprint()
        await restarted.close()
