"""SIGKILL a process running FileEventLog + manager + snapshots at random moments.

After every kill the restarted manager's state equals a full replay of the log, and
every write the child saw acknowledged is in the log with identical bytes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventlog.file import FileEventLog
from tests.rlmm.helpers import read_all, sequential_replay
from tests.rlmm.kill_worker import PARTITIONS, TPS, open_manager

ROOT = Path(__file__).resolve().parents[2]
KILLS = 24  # each kill at a random moment of appends, snapshots and restores


def run_and_kill(directory: Path, seed: int, delay_s: float, *extra: str) -> list[bytes]:
    """Start the worker, SIGKILL it ``delay_s`` after it is ready; its acked events."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.rlmm.kill_worker", str(directory), str(seed), *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    first = child.stdout.readline()
    if first != b"READY\n":
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"worker did not start: {first!r} {err.decode()[-2000:]}")
    time.sleep(delay_s)
    child.send_signal(signal.SIGKILL)
    out, err = child.communicate()
    assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
    acked = []
    for line in out.split(b"\n")[:-1]:  # the last piece may be a torn line
        if line.startswith(b"ACK "):
            acked.append(bytes.fromhex(line[4:].decode()))
        else:
            assert not line.startswith(b"ERR"), line
    return acked


@pytest.mark.slow
async def test_sigkill_during_appends_and_snapshots(tmp_path: Path) -> None:
    rng = random.Random(2024)
    all_acked: list[bytes] = []
    restored = 0
    for i in range(KILLS):
        all_acked += run_and_kill(tmp_path, i, rng.uniform(0.0, 0.25))
        manager = open_manager(tmp_path, every_events=10_000)
        await manager.start()
        await manager.on_partition_leadership_changes(TPS, [])
        await manager.wait_until_ready(TPS, 30)
        restored += manager.stats.restored_from_snapshot
        reader = FileEventLog(tmp_path / "log", PARTITIONS, read_only=True)
        try:
            expected = await sequential_replay(reader)
            assert manager.fingerprint() == expected.fingerprint(), f"after kill {i}"
            stored = {v for p in range(PARTITIONS) for _, v in await read_all(reader, p)}
        finally:
            await reader.close()
        missing = [a for a in all_acked if a not in stored]
        assert not missing, f"after kill {i}: {len(missing)} acknowledged events lost"
        # crash the parent side too: no clean-shutdown snapshot half of the time
        if rng.random() < 0.5:
            await manager.close()
        else:
            for task in manager._consumers.values():
                task.cancel()
            await manager._log.close()
    assert len(all_acked) > KILLS  # the workload really ran
    assert restored > 0  # and restarts really used snapshots
