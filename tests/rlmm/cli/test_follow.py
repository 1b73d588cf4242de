"""`rlmm events --follow` prints events appended after it started, and ends cleanly on
SIGINT (exit 0); the follower reads without the writer's lock, so a manager writes
meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from rlmm.partitioning import metadata_partition_for
from tests.rlmm.cli.store import ROOT, build_store, sid, stuck_started


def test_follow_sees_new_events_and_stops_on_sigint(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    tp = next(iter(store.segments))
    p = metadata_partition_for(tp, 4)
    before = sum(
        2 * len(ms) for t, ms in store.segments.items() if metadata_partition_for(t, 4) == p
    )
    env = {k: v for k, v in os.environ.items() if k != "RLMM_CONFIG"}
    with subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", "events", "--follow", "--metadata-partition", str(p),
         "--config", str(store.config_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as follower:  # fmt: skip
        try:
            assert follower.stdout is not None
            seen = [json.loads(follower.stdout.readline()) for _ in range(before)]
            assert [e["offset"] for e in seen] == list(range(before))
            added = stuck_started(store, age_ms=0)  # a manager appends while we follow
            new = json.loads(follower.stdout.readline())
            assert (new["offset"], new["segment_id"], new["state"]) == (
                before,
                sid(added),
                "COPY_SEGMENT_STARTED",
            )
            follower.send_signal(signal.SIGINT)
            assert follower.wait(timeout=30) == 0
            assert "Traceback" not in (follower.stderr.read() if follower.stderr else "")
        finally:
            if follower.poll() is None:
                follower.kill()


def test_follow_ends_with_exit_0_on_sigterm_too(tmp_path: Path) -> None:
    """SIGTERM (systemd, Kubernetes, `timeout`) ends a follow as Ctrl-C does (it exited 143)."""
    store = build_store(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "RLMM_CONFIG"}
    with subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", "events", "--follow",
         "--config", str(store.config_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as follower:  # fmt: skip
        try:
            assert follower.stdout is not None
            json.loads(follower.stdout.readline())  # following now
            follower.send_signal(signal.SIGTERM)
            assert follower.wait(timeout=30) == 0
            assert "Traceback" not in (follower.stderr.read() if follower.stderr else "")
        finally:
            if follower.poll() is None:
                follower.kill()
