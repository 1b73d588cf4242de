"""The manager over a FileEventLog with retention: claims after every snapshot, a log
that shrinks, and restarts (clean, crashed, newest snapshot corrupt) that still
rebuild exactly the state the manager had applied from offset 0."""

from __future__ import annotations

from pathlib import Path

from eventlog.file import FileEventLog
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import TopicIdPartition
from rlmm.snapshotting import SnapshotPolicy
from snapshot.local import LocalSnapshotStore
from tests.rlmm.factories import tp
from tests.rlmm.test_manager_snapshots import Workload

N = 4
TPS = [tp(i) for i in range(6)]


def open_log(directory: Path) -> FileEventLog:
    return FileEventLog(directory / "log", N, segment_bytes=2048)


async def start(
    log: FileEventLog, directory: Path, tps: list[TopicIdPartition] = TPS, every: int = 30
) -> TopicBasedRemoteLogMetadataManager:
    policy = SnapshotPolicy(
        directory / "snapshots", every_events=every, interval_s=3600, keep=2, retention=True
    )
    manager = TopicBasedRemoteLogMetadataManager(log, snapshot_policy=policy)
    await manager.start()
    await manager.on_partition_leadership_changes(tps, [])
    await manager.wait_until_ready(tps, 20)
    return manager


async def run(manager: TopicBasedRemoteLogMetadataManager, work: Workload, steps: int) -> None:
    for i in range(steps):
        await work.step(manager)
        if i % 20 == 19:
            await manager._snapshotter.wait_idle()  # type: ignore[union-attr]
    await manager._snapshotter.wait_idle()  # type: ignore[union-attr]


def crash(manager: TopicBasedRemoteLogMetadataManager) -> None:
    """The process goes away: no final snapshot (its store holds no connections)."""
    for task in manager._consumers.values():
        task.cancel()


async def test_claims_follow_the_kept_snapshots_and_the_log_shrinks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    manager = await start(log, tmp_path)
    await run(manager, Workload(TPS, 1), 400)
    assert manager.stats.snapshots_written >= 5
    claim = (await log.retention_claims()).claims["broker-0"]
    kept = [s for _, s in LocalSnapshotStore(tmp_path / "snapshots").iter_valid()]
    assert len(kept) == 2
    for p in range(N):
        expected = min(s.applied_offsets.get(p, -1) + 1 for s in kept)
        assert claim.floors.get(p, 0) == expected
    starts = await log.start_offsets(range(N))
    assert any(starts[p] > 0 for p in range(N))
    assert all(starts[p] <= claim.floors.get(p, 0) for p in range(N))
    assert log.stats.retention_deleted_segments > 0
    # The claim tells a reader below the log start where to go.
    assert [e["location"] for e in claim.start_from["snapshots"]] == [
        str(p) for p in LocalSnapshotStore(tmp_path / "snapshots").paths()
    ]
    await manager.close()
    await log.close()


async def test_restarts_rebuild_the_applied_state(tmp_path: Path) -> None:
    work = Workload(TPS, 2)
    log = open_log(tmp_path)
    manager = await start(log, tmp_path)
    await run(manager, work, 300)
    # Clean restart.
    expected = manager.fingerprint()
    await manager.close()
    await log.close()
    log = open_log(tmp_path)
    manager = await start(log, tmp_path)
    assert manager.stats.restored_from_snapshot
    assert manager.fingerprint() == expected
    await run(manager, work, 200)
    # Crash: only the periodic snapshots are there, the tail is replayed.
    expected = manager.fingerprint()
    crash(manager)
    await log.close()
    log = open_log(tmp_path)
    assert any(s > 0 for s in (await log.start_offsets(range(N))).values())
    manager = await start(log, tmp_path)
    assert manager.fingerprint() == expected
    await manager.close()
    await log.close()


async def test_newest_snapshot_corrupt_the_older_one_still_has_its_log(tmp_path: Path) -> None:
    work = Workload(TPS, 3)
    log = open_log(tmp_path)
    manager = await start(log, tmp_path)
    await run(manager, work, 300)
    expected = manager.fingerprint()
    crash(manager)
    await log.close()
    newest = LocalSnapshotStore(tmp_path / "snapshots").paths()[0]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert any(s > 0 for s in (await log.start_offsets(range(N))).values())
    manager = await start(log, tmp_path)
    # The older kept snapshot is what retention kept the log for.
    assert manager.stats.restored_from_snapshot and manager.stats.read_errors == 0
    assert manager.fingerprint() == expected
    await manager.close()
    await log.close()


async def test_a_registered_lagging_reader_holds_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await log.start()
    await log.register_retention("archive-view", {p: 0 for p in range(N)})
    manager = await start(log, tmp_path)
    await run(manager, Workload(TPS, 4), 300)
    assert manager.stats.snapshots_written >= 3
    assert await log.start_offsets(range(N)) == dict.fromkeys(range(N), 0)
    assert await log.unregister_retention("archive-view")
    await manager.snapshot()  # the next claim is a safe point
    assert any(s > 0 for s in (await log.start_offsets(range(N))).values())
    await manager.close()
    await log.close()


async def test_retention_off_deletes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    policy = SnapshotPolicy(tmp_path / "snapshots", every_events=30, interval_s=3600)
    manager = TopicBasedRemoteLogMetadataManager(log, snapshot_policy=policy)
    await manager.start()
    await manager.on_partition_leadership_changes(TPS, [])
    await manager.wait_until_ready(TPS, 20)
    await run(manager, Workload(TPS, 5), 200)
    assert (await log.retention_claims()).claims == {}
    assert await log.start_offsets(range(N)) == dict.fromkeys(range(N), 0)
    await manager.close()
    await log.close()
