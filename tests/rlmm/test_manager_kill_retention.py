"""SIGKILL a manager whose file log deletes segments (retention) at random moments.

A verifier in this process plays the lagging reader: it registers its own claim at
the offsets it has archived, so the child may delete only what the verifier already
copied. After every kill: the verifier copies the new records (the log must still hold
them: nothing it claimed was deleted), the restarted manager's state equals a
sequential replay of everything ever written, and every acknowledged event is there.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest

from eventlog.file import FileEventLog
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.codec import decode
from rlmm.errors import RemoteStorageError
from tests.rlmm.kill_worker import PARTITIONS, TPS, open_manager
from tests.rlmm.test_manager_kill import run_and_kill

KILLS = 20


async def copy_new_records(directory: Path, archive: dict[int, list[bytes]]) -> None:
    """Append to ``archive`` what the log holds past what was archived (read-only)."""
    reader = FileEventLog(directory / "log", PARTITIONS, read_only=True)
    try:
        for p in range(PARTITIONS):
            start = (await reader.start_offsets([p]))[p]
            assert start <= len(archive[p]), f"partition {p}: deleted past the verifier's claim"
            end = (await reader.end_offsets([p]))[p]
            first = len(archive[p])
            records: list[tuple[int, bytes]] = []
            if end > first:
                batches = reader.read_batches(p, first)
                try:
                    async for batch in batches:
                        records += [r for r in batch if r[0] < end]
                        if records[-1][0] >= end - 1:
                            break
                finally:
                    await batches.aclose()  # type: ignore[attr-defined]
            assert [o for o, _ in records] == list(range(first, end))
            archive[p] += [v for _, v in records]
    finally:
        await reader.close()


def replay(archive: dict[int, list[bytes]]) -> RemotePartitionMetadataStore:
    store = RemotePartitionMetadataStore()
    for p in range(PARTITIONS):
        for value in archive[p]:
            with contextlib.suppress(RemoteStorageError):
                store.apply(decode(value))
    return store


@pytest.mark.slow
async def test_sigkill_with_retention_loses_nothing_a_claim_covers(tmp_path: Path) -> None:
    rng = random.Random(4242)
    archive: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    acked: list[bytes] = []
    restored = 0
    # Registered before the log even exists: from the first write on, it holds the log.
    (tmp_path / "log").mkdir()
    FileEventLog(tmp_path / "log", PARTITIONS).retention.register("verifier", {})
    for i in range(KILLS):
        acked += run_and_kill(tmp_path, i, rng.uniform(0.05, 0.4), "retention")
        await copy_new_records(tmp_path, archive)
        manager = open_manager(tmp_path, every_events=rng.randrange(3, 40), retention=True)
        await manager.start()
        await manager.on_partition_leadership_changes(TPS, [])
        await manager.wait_until_ready(TPS, 30)
        restored += manager.stats.restored_from_snapshot
        assert manager.fingerprint() == replay(archive).fingerprint(), f"after kill {i}"
        stored = {v for values in archive.values() for v in values}
        missing = [a for a in acked if a not in stored]
        assert not missing, f"after kill {i}: {len(missing)} acknowledged events lost"
        log = manager._log
        assert isinstance(log, FileEventLog)
        # The verifier has copied everything: the log may now drop it (once covered).
        await log.register_retention("verifier", {p: len(archive[p]) for p in range(PARTITIONS)})
        if rng.random() < 0.5:
            await manager.close()
        else:
            for task in manager._consumers.values():
                task.cancel()
            await log.close()
    final = FileEventLog(tmp_path / "log", PARTITIONS, read_only=True)
    try:
        starts = await final.start_offsets(range(PARTITIONS))
    finally:
        await final.close()
    assert len(acked) > KILLS and restored > 0
    assert any(s > 0 for s in starts.values()), "retention never deleted anything"
