"""SIGKILL of the `rlmm offload` process at every step of copy and delete, then recovery.

Each scenario writes fresh partition dirs, runs the sidecar several times with a
kill point (``_RLMM_OFFLOAD_KILL_AT``: after STARTED, mid-upload, after the upload,
after FINISHED, after DELETE_STARTED, mid-delete, after the delete), then restarts it
once in-process and checks: every FINISHED segment's objects equal the local files,
no object without a live segment, nothing left STARTED, the remote segments of each
partition are the newest rolled ones without a hole, and the state restored from the
snapshot equals a full replay of the event log.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from remote.local import LocalRemoteStorageManager
from remote.segments import PartitionDir
from rlmm.config import load_config
from rlmm.factory import create_manager, open_event_log
from rlmm.offload.display import Display
from rlmm.offload.faults import ENV, STEPS
from rlmm.offload.sidecar import run_sidecar
from tests.rlmm.offload.conftest import check_invariants, local_keys, write_partition

pytestmark = pytest.mark.slow

RLMM = str(Path(sys.executable).parent / "rlmm")
TIMED = ("copy.upload", "delete.rsm")  # killed from a timer: lands inside the RSM call
KILLS = 24  # the first two scenarios cycle through every step, the rest draw at random


def scenario(tmp: Path, seed: int) -> tuple[Path, Path, list[PartitionDir]]:
    logs = tmp / "logs"
    pdirs = [
        write_partition(logs, "orders", p, codec=c, records=700, segment_bytes=3000)
        for p, c in ((0, "none"), (1, "gzip"))
    ]
    keep = sum(s.size_in_bytes for s in pdirs[0].segments()) // 2
    config = tmp / "offload.toml"
    config.write_text(
        f"""
data_dir = "{tmp / "data"}"
[eventlog]
partitions = 3
segment_bytes = {4096 + seed % 3 * 2048}
[snapshot]
every_events = {5 + seed % 7}
retention = false   # keep the whole metadata log: the check replays it from offset 0
[remote]
fsync = false
[offload]
"retention.ms" = -1
"retention.bytes" = {keep}
"""
    )
    return logs, config, pdirs


def run_killed(logs: Path, config: Path, spec: str) -> int:
    env = {**os.environ, ENV: spec}
    proc = subprocess.run(
        [RLMM, "offload", "--once", "--config", str(config), "--log-dir", str(logs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, -9), proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.returncode


async def verify(logs: Path, config_path: Path, pdirs: list[PartitionDir]) -> None:
    config = load_config(config_path, env={})
    report = await run_sidecar(config, [logs], once=True, display=Display(rich=False))
    assert report.tally.errors == []
    tps = [p.topic_id_partition() for p in pdirs]
    restored = create_manager(config, open_event_log(config))
    replayed = create_manager(
        load_config(config_path, env={}, overrides={"snapshot.enabled": False}),
        open_event_log(config),
    )
    rsm = LocalRemoteStorageManager(config.data_dir / "remote")
    try:
        await restored.start()
        await restored.on_partition_leadership_changes(tps, [])
        await restored.wait_until_ready(tps, 30)
        live = check_invariants(restored, rsm, pdirs, local_keys(rsm.root))
        for pdir, tp in zip(pdirs, tps, strict=True):
            starts = [m.start_offset for m in live if m.topic_id_partition == tp]
            rolled = [s.base_offset for s in pdir.segments()[:-1]]
            assert starts and starts == rolled[len(rolled) - len(starts) :], "hole in the lineage"
        fingerprint = restored.fingerprint(tps)
        await restored.close()
        await replayed.start()
        await replayed.on_partition_leadership_changes(tps, [])
        await replayed.wait_until_ready(tps, 30)
        assert replayed.fingerprint(tps) == fingerprint
    finally:
        await restored.close()
        await replayed.close()
        rsm.close()


async def test_sigkill_at_every_step_then_recover(tmp_path: Path) -> None:
    kills = 0
    hit_steps: set[str] = set()
    seed = 0
    while kills < KILLS:
        rng = random.Random(seed)
        logs, config, pdirs = scenario(tmp_path / f"s{seed}", seed)
        for _ in range(6):
            step = STEPS[(seed * 6 + _) % len(STEPS)] if seed < 2 else rng.choice(STEPS)
            spec = f"{step}@{rng.randint(1, 3)}"
            if step in TIMED:
                spec += f"~{rng.uniform(0, 4):.2f}"
            if run_killed(logs, config, spec) == -9:
                kills += 1
                hit_steps.add(step)
        await verify(logs, config, pdirs)
        seed += 1
    assert hit_steps == set(STEPS), f"never killed at {set(STEPS) - hit_steps}"
