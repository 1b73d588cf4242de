"""Kill test: SIGKILL a process writing large snapshots at random moments, many times.

After every kill, before anything cleans up: every final-named file decodes (no torn
snapshot is ever visible), there are at most keep + 1 of them and at most one temp
file; ``load_latest`` returns the newest completed snapshot (or the one whose rename
had already happened when the kill landed) with exactly the content written. Then
the next writable open removes the leftovers and prunes back to ``keep``, and the
next child resumes from there - the real restart path.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from snapshot import SnapshotStore, decode_snapshot
from tests.snapshot.kill_writer import expected_state

KILL_WRITER = Path(__file__).with_name("kill_writer.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
KILLS = 30
KEEP = 2
STATE_BYTES = 6_000_000
# One write of this state takes ~30-100 ms here; delays span several writes so kills
# land in every phase: building the state, encoding, writing, fsync, rename, pruning.
MAX_DELAY_S = 0.25


def _start_writer(directory: Path) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    child = subprocess.Popen(
        [sys.executable, str(KILL_WRITER), str(directory), str(KEEP), str(STATE_BYTES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    ready = child.stdout.readline().split()
    if ready[:1] != ["ready"]:
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"kill writer did not start: {ready!r}\n{err}")
    return child, int(ready[1])


@pytest.mark.slow
def test_sigkill_at_random_moments_never_tears_a_snapshot(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    directory = tmp_path / "snapshots"
    newest = -1  # newest snapshot number known to be durable (-1: none yet)
    phases: Counter[str] = Counter()
    for run in range(KILLS):
        where = f"run {run}, seed {seed}"
        child, resumed = _start_writer(directory)
        assert resumed == newest, where
        # Some kills right at the start of the loop, the rest anywhere in it.
        delay = 0.0 if run % 6 == 0 else rng.uniform(0.0, MAX_DELAY_S)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate()
        assert child.returncode == -signal.SIGKILL, f"{where}: writer died early\n{err}"
        completed = [int(line) for line in out.split()]
        done = completed[-1] if completed else newest

        finals = sorted(directory.glob("snapshot-*.rlmm"))
        temps = sorted(directory.glob(".snapshot-*.tmp"))
        phases["in write/fsync (temp file left)" if temps else "between writes"] += 1
        if len(finals) > KEEP:
            phases["after rename, before prune"] += 1
        assert len(finals) <= KEEP + 1, f"{where}: {finals}"
        assert len(temps) <= 1, f"{where}: {temps}"
        # No torn file is ever visible under a final name.
        for path in finals:
            decode_snapshot(path.read_bytes(), str(path))

        loaded = SnapshotStore(directory, keep=KEEP, read_only=True).load_latest()
        if loaded is None:
            # Only possible if the very first write never reached its rename.
            assert done == -1 and finals == [], f"{where}: nothing loaded, {done} completed"
            SnapshotStore(directory, keep=KEEP)
            assert list(directory.glob(".snapshot-*.tmp")) == [], where
            continue
        i = int(loaded.state["i"])
        # The kill may land after the rename but before the child printed the number.
        assert i in (done, done + 1), f"{where}: loaded {i}, completed {done}"
        assert loaded.state == expected_state(i, STATE_BYTES), where
        assert dict(loaded.applied_offsets) == {i % 50: i} and loaded.created_ms == i

        store = SnapshotStore(directory, keep=KEEP)  # the next open cleans up
        assert list(directory.glob(".snapshot-*.tmp")) == [], where
        assert len(store.paths()) <= KEEP, where
        assert store.stats.temp_removed == len(temps), where
        newest = i
    print(f"kill phases (seed {seed}): {dict(phases)}")
    assert newest >= 3, "the writer hardly ever completed a snapshot"
    assert phases["in write/fsync (temp file left)"] >= 1, dict(phases)
