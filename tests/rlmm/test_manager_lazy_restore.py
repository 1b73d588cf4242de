"""Lazy restore: restored partitions stay cold (block + pending events) until needed,
and the state always equals a full replay of the log, read or not (including after a
snapshot taken while partitions were cold, and when a block turns out corrupt)."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import msgpack
import pytest

from eventlog import EventLogError
from eventlog.memory import MemoryEventLog
from rlmm.cache import metadata_store
from rlmm.codec import encode
from rlmm.errors import RemoteStorageNotReadyError, SnapshotBlockError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import TopicIdPartition
from rlmm.ops.snapshot_report import inspect_snapshot
from rlmm.partitioning import metadata_partition_for
from rlmm.snapshotting import SnapshotPolicy
from snapshot import Snapshot, SnapshotStore
from tests.rlmm.factories import S, segment, tp, update
from tests.rlmm.helpers import sequential_replay
from tests.rlmm.test_manager_snapshots import N, Workload, start


async def caught_up(manager: TopicBasedRemoteLogMetadataManager, log: MemoryEventLog) -> None:
    ends = await log.end_offsets(range(N))
    async with asyncio.timeout(10):
        while any(manager.applied_offsets.get(p, -1) < e - 1 for p, e in ends.items() if e):
            await asyncio.sleep(0.01)


async def snapshotted_log(tmp_path: Path, seed: int) -> tuple[MemoryEventLog, list, Workload]:
    log = MemoryEventLog(N)
    tps = [tp(i) for i in range(8)]
    manager = await start(log, tmp_path / "a", tps)
    work = Workload(tps, seed)
    for _ in range(150):
        await work.step(manager)
    await manager.close()  # clean shutdown: a snapshot covering everything
    return log, tps, work


async def test_restart_leaves_partitions_cold_until_read(tmp_path: Path) -> None:
    log, tps, _ = await snapshotted_log(tmp_path, 21)
    restarted = await start(log, tmp_path / "a", tps)
    store = restarted._store
    known = len(store.caches)
    assert known and store.cold_count == known  # nothing decoded at start
    assert all(restarted.is_ready(t) for t in tps)
    read = next(t for t in tps if t in store.caches)
    restarted.list_remote_log_segments(read)
    assert not store.is_cold(read) and store.cold_count == known - 1
    # partitions never read: the fingerprint (which decodes them) equals a full replay
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


async def test_tail_events_on_cold_partitions_apply_in_order(tmp_path: Path) -> None:
    log, tps, work = await snapshotted_log(tmp_path, 22)
    reader = await start(log, tmp_path / "a", tps)
    writer = await start(log, tmp_path / "b", tps)  # another broker, no snapshot: hot
    for _ in range(150):
        await work.step(writer)
    # Events no writer would be told "done" for, landing on cold partitions: a
    # redelivered add (producer retry) and a transition that is illegal by now.
    t = next(t for t in tps if reader._store.is_cold(t))
    p = metadata_partition_for(t, N)
    current = writer.list_remote_log_segments(t)
    fresh = segment(t, 10**9, 10**9 + 5, {99: 10**9})
    await log.append(p, encode(fresh))  # legal: a new segment
    await log.append(p, encode(fresh))  # a redelivered copy of it
    illegal = next((s for s in current if s.state != S.DELETE_SEGMENT_STARTED), None)
    if illegal is not None:  # STARTED/FINISHED -> DELETE_SEGMENT_FINISHED is illegal
        await log.append(p, encode(update(illegal, S.DELETE_SEGMENT_FINISHED)))
    await caught_up(reader, log)
    store = reader._store
    pending = [c for c in store.caches.cold.values() if c.pending]
    assert pending, "the tail should have landed on cold partitions"
    # a snapshot while some partitions are cold (with and without pending events)
    await reader.snapshot()
    assert reader.fingerprint() == (await sequential_replay(log)).fingerprint()
    assert store.deferred_skips >= 1  # the redelivered copy, skipped in order
    await reader.close()
    await writer.close()
    again = await start(log, tmp_path / "a", tps)
    assert again.stats.applied_events == 0
    assert again.fingerprint() == (await sequential_replay(log)).fingerprint()
    await again.close()


async def test_undecodable_block_replays_its_metadata_partition(tmp_path: Path) -> None:
    log, tps, _ = await snapshotted_log(tmp_path, 23)
    store = SnapshotStore(tmp_path / "a")
    snap = store.load_latest()
    assert snap is not None
    # A CRC-valid snapshot whose writer put garbage in one partition's block.
    state = [list(entry) for entry in snap.state]
    victim = next(entry for entry in state if entry[3] is not None)
    victim[3] = b"\xc1 not msgpack"
    store.write(
        Snapshot(snap.partition_count, dict(snap.applied_offsets), state, snap.created_ms + 1)
    )
    restarted = await start(log, tmp_path / "a", tps)
    bad = next(t for t in tps if t.partition == victim[2])
    try:
        restarted.list_remote_log_segments(bad)
    except SnapshotBlockError as e:
        assert isinstance(e, RemoteStorageNotReadyError)  # retriable, fails closed
        assert str(bad) in str(e) and "snapshot" in str(e)
    else:
        raise AssertionError("a corrupt block must not be read as if it were state")
    await restarted.wait_until_ready(tps, 10)
    assert restarted.stats.full_replays == 1
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


TPS = [tp(i) for i in range(8)]


async def worked(log: MemoryEventLog, directory: Path, steps: int, seed: int) -> Workload:
    """Run a manager over ``log`` for ``steps`` random writes and close it (snapshot)."""
    manager = await start(log, directory, TPS)
    work = Workload(TPS, seed)
    for _ in range(steps):
        await work.step(manager)
    await manager.close()
    return work


async def tail(log: MemoryEventLog, work: Workload, steps: int) -> None:
    """More writes by another manager without snapshots (another broker's traffic)."""
    other = TopicBasedRemoteLogMetadataManager(log, close_event_log=False)
    await other.start()
    await other.on_partition_leadership_changes(TPS, [])
    await other.wait_until_ready(TPS, 10)
    for _ in range(steps):
        await work.step(other)
    await other.close()


def segment_views(manager: object, tps: list[TopicIdPartition]) -> dict[TopicIdPartition, list]:
    return {t: manager.list_remote_log_segments(t) for t in tps}  # type: ignore[attr-defined]


async def test_never_read_partitions_equal_a_full_replay(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    await worked(log, tmp_path, 200, 1)
    restarted = await start(log, tmp_path, TPS)
    store = restarted._store
    assert restarted.stats.restored_from_snapshot and restarted.stats.applied_events == 0
    cold = store.cold_partitions()
    assert cold == set(store.caches)  # nothing decoded by start() and readiness
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


@pytest.mark.parametrize("seed", range(4))
async def test_tail_events_on_cold_partitions(tmp_path: Path, seed: int) -> None:
    log = MemoryEventLog(N)
    work = await worked(log, tmp_path, 150, seed)
    await tail(log, work, 60)
    restarted = await start(log, tmp_path, TPS)
    store = restarted._store
    assert restarted.stats.applied_events > 0
    queued = [t for t in store.cold_partitions() if store._cold[t].pending]
    assert queued  # tail events waited on partitions nobody had read
    full = await sequential_replay(log)
    rng = random.Random(seed)
    read = rng.sample(TPS, 4)
    for t in read:  # first reads decode and replay the queue
        assert restarted.list_remote_log_segments(t) == (
            full.caches[t].list_remote_log_segments() if t in full.caches else []
        )
    assert restarted.fingerprint() == full.fingerprint()
    await restarted.close()


async def test_snapshot_while_partitions_are_cold(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    work = await worked(log, tmp_path, 150, 7)
    await tail(log, work, 40)
    manager = await start(log, tmp_path, TPS)
    store = manager._store
    read = TPS[0]
    manager.list_remote_log_segments(read)
    written = TPS[1]
    m = segment(written, 10**6, 10**6 + 9, {99: 10**6})
    await manager.add_remote_log_segment_metadata(m)
    await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    cold = store.cold_partitions()
    assert cold and read not in cold and written not in cold
    blocks = {t: store._cold[t].block for t in cold}
    await manager.snapshot()
    assert store.cold_partitions() == cold  # the snapshot decoded nothing
    snap = SnapshotStore(tmp_path).load_latest()
    assert snap is not None
    stored = {(e[0], e[2]): e[3] for e in snap.state}
    for t, block in blocks.items():
        assert stored[(t.topic_id.bytes, t.partition)] == block  # copied, not re-encoded
    # crash: no clean-shutdown snapshot, the next start uses the one taken above
    for task in manager._consumers.values():
        task.cancel()
    restarted = await start(log, tmp_path, TPS)
    assert restarted.stats.applied_events == 0
    assert restarted.fingerprint() == (await sequential_replay(log)).fingerprint()
    await restarted.close()


def corrupt_newest_block(directory: Path, victim: TopicIdPartition) -> None:
    """Rewrite the newest snapshot with ``victim``'s block truncated (the file's CRC is valid)."""
    store = SnapshotStore(directory)
    snap = store.load_latest()
    assert snap is not None
    state = snap.state
    (entry,) = [e for e in state if (e[0], e[2]) == (victim.topic_id.bytes, victim.partition)]
    entry[3] = entry[3][: len(entry[3]) // 2]
    store.write(
        Snapshot(
            partition_count=snap.partition_count,
            applied_offsets=dict(snap.applied_offsets),
            state=msgpack.unpackb(msgpack.packb(state)),
            created_ms=snap.created_ms + 1,
        )
    )


async def test_corrupt_block_on_read_replays_that_metadata_partition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = MemoryEventLog(N)
    await worked(log, tmp_path, 200, 3)
    victim = TPS[2]
    corrupt_newest_block(tmp_path, victim)
    manager = await start(log, tmp_path, TPS)
    p = metadata_partition_for(victim, N)
    assert manager.stats.restored_from_snapshot
    with caplog.at_level(logging.ERROR), pytest.raises(SnapshotBlockError) as info:
        manager.list_remote_log_segments(victim)
    message = str(info.value)
    assert str(victim) in message and str(tmp_path) in message
    assert isinstance(info.value, RemoteStorageNotReadyError) and info.value.retriable
    assert f"replaying metadata partition {p} from offset 0" in caplog.text
    assert manager.stats.full_replays == 1
    await manager.wait_until_ready(TPS, 10)
    full = await sequential_replay(log)
    assert (
        manager.list_remote_log_segments(victim) == full.caches[victim].list_remote_log_segments()
    )
    # other metadata partitions kept their snapshot (still cold, not replayed)
    others = [t for t in TPS if metadata_partition_for(t, N) != p and t in full.caches]
    assert others and all(manager._store.is_cold(t) for t in others)
    assert manager.fingerprint() == full.fingerprint()
    await manager.close()


async def test_corrupt_block_on_write(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    work = await worked(log, tmp_path, 200, 4)
    victim = TPS[5]
    corrupt_newest_block(tmp_path, victim)
    manager = await start(log, tmp_path, TPS)
    live = [m for m in work.live if m.topic_id_partition == victim]
    with pytest.raises(SnapshotBlockError):
        await manager.add_remote_log_segment_metadata(
            segment(victim, 10**7, 10**7 + 1, {50: 10**7})
        )
    await manager.wait_until_ready(TPS, 10)
    if live:
        assert manager.list_remote_log_segments(victim)
    await manager.add_remote_log_segment_metadata(segment(victim, 10**7, 10**7 + 1, {50: 10**7}))
    assert manager.fingerprint() == (await sequential_replay(log)).fingerprint()
    await manager.close()


async def test_corrupt_block_in_the_apply_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metadata_store, "MAX_PENDING", 0)  # every tail event decodes
    log = MemoryEventLog(N)
    work = await worked(log, tmp_path, 150, 5)
    victim = next(t for t in TPS if any(m.topic_id_partition == t for m in work.live))
    corrupt_newest_block(tmp_path, victim)
    m = segment(victim, 10**8, 10**8 + 3, {70: 10**8})
    other = TopicBasedRemoteLogMetadataManager(log, close_event_log=False)
    await other.start()
    await other.on_partition_leadership_changes([victim], [])
    await other.wait_until_ready([victim], 10)
    await other.add_remote_log_segment_metadata(m)  # a tail event on the corrupt partition
    await other.close()
    manager = await start(log, tmp_path, TPS)
    assert manager.stats.full_replays == 1 and not manager._store.is_cold(victim)
    assert m in manager.list_remote_log_segments(victim)
    assert manager.fingerprint() == (await sequential_replay(log)).fingerprint()
    await manager.close()


class FailingStartLog(MemoryEventLog):
    async def start(self) -> None:
        await asyncio.sleep(0.01)  # the snapshot load is under way meanwhile
        raise EventLogError("the log cannot start")


async def test_log_start_failure_while_loading_the_snapshot(tmp_path: Path) -> None:
    await worked(MemoryEventLog(N), tmp_path, 50, 8)
    manager = TopicBasedRemoteLogMetadataManager(
        FailingStartLog(N), snapshot_policy=SnapshotPolicy(tmp_path), close_event_log=False
    )
    with pytest.raises(EventLogError, match="cannot start"):
        await manager.start()
    assert not manager.stats.restored_from_snapshot
    await manager.close()


async def test_snapshot_report_names_a_corrupt_block(tmp_path: Path) -> None:
    log = MemoryEventLog(N)
    await worked(log, tmp_path, 120, 9)
    corrupt_newest_block(tmp_path, TPS[3])
    newest = SnapshotStore(tmp_path).paths()[0]
    report = inspect_snapshot(newest)
    assert not report.ok and report.partition_count == N
    assert str(TPS[3]) in (report.problem or "") and "corrupt" in (report.problem or "")
