"""Lazy restore: restored partitions stay cold (block + pending events) until needed,
and the state always equals a full replay of the log, read or not."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eventlog.memory import MemoryEventLog
from rlmm.codec import encode
from rlmm.errors import RemoteStorageNotReadyError, SnapshotBlockError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.partitioning import metadata_partition_for
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
