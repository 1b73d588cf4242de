"""The short soak (bench/soak.py for 150 s, run in the background from the session's
start by tests/fixtures/soak.py): everything failing at once, nothing lost.

Invariant checked: on a real Apache Kafka 4.1.1 broker with producers of every codec,
keys, headers and aborted transactions, Kafka deleting local segments, the sidecar
SIGKILLed and restarted, S3 faults and a storm of them, and one broker SIGKILL, the
archive ends up equal to what Kafka consumers read (both isolation levels; nothing
lost, nothing twice), the crash leftovers are found by verify and removed by gc
exactly, remote retention expired what it should, the storm's alert
(RlmmRemoteStorageRefusing: S3 held the copies most of each window) fired during the
storm and resolved after it (its windows scaled by 0.25 to fit the short run; the
sidecar is not killed during the storm here, as each restart begins unpaused), every
dashboard query has data, and no process outlives the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.fixtures.soak import ROOT, BackgroundSoak

# One worker runs both, one after the other: the SIGTERM test's soak must not load the
# machine while the short soak times its alert.
pytestmark = [
    pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.timeout(600),
    pytest.mark.xdist_group("short-soak"),
]  # fmt: skip


def test_short_soak(short_soak: BackgroundSoak) -> None:
    # Started in the background with the session's first test (tests/fixtures/soak.py).
    code = short_soak.wait(timeout=540)
    assert code is not None, "the soak did not end within 540 s"
    out, err, work = short_soak.out, short_soak.err, short_soak.work
    assert out.strip(), f"no report (exit {code}):\n{err[-4000:]}"
    report = json.loads(out)
    summary = {k: v for k, v in report.items() if k not in ("partitions", "machine", "settings")}
    # The failures last: a CI log keeps a failure's tail.
    assert report["ok"], f"{json.dumps(summary, indent=1)[:6000]}\nfailures: {report['failures']}"
    assert code == 0
    assert report["records_lost"] == report["duplicates"] == report["mismatched"] == 0
    assert report["records_compared"] > 5000
    assert report["kills"]["total"] >= 2 and report["broker_restarts"] == 1
    assert sum(report["faults_injected"].values()) > 50
    assert report["segments_copied"] > 50 and report["segments_expired"] > 0
    assert (
        report["verify"]["leftovers_found"] and report["verify"]["gc_removed_exactly_the_leftovers"]
    )
    assert report["verify"]["after_gc_and_clean_round"]["ok"] is True
    assert report["alert"]["alert"] == "RlmmRemoteStorageRefusing"
    assert report["alert"]["fired_s_after_storm_start"] is not None
    assert report["alert"]["resolved_s_after_storm_end"] is not None
    assert report["dashboard"]["without_data"] == []
    assert report["leftover_processes"] == []
    assert not work.exists()  # the soak removes its work dir
    mine = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(work) in " ".join(p.info["cmdline"] or ())
    ]
    assert mine == []


def test_a_soak_stopped_by_sigterm_stops_what_it_started(
    apache_kafka_libs: object, prometheus_bin: object, short_soak: BackgroundSoak, tmp_path: Path
) -> None:
    # Its brokers, sidecars, S3 server and Prometheus run in sessions of their own: a
    # signal to the soak alone reaches none of them, so the soak must stop them.
    if short_soak.proc is not None:
        short_soak.wait(timeout=540)  # in whichever order the two run
    work = tmp_path / "soak"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", "120", "--seed", "3",
         "--work", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        wanted = ["rlmm offload", "moto.server", "prometheus", "kafka.Kafka"]
        while not all(any(w in line for line in started(proc).values()) for w in wanted):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"not started in 240 s: {started(proc)}"
            time.sleep(0.5)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
        assert "stopped by SIGTERM" in err
        alive = [" ".join(c.cmdline())[:150] for c in children if alive_still(c)]
        assert alive == [], err[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def started(proc: subprocess.Popen[str]) -> dict[int, str]:
    """The command lines of ``proc``'s live descendants, by pid."""
    found = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found[child.pid] = " ".join(child.cmdline())
    return found


def alive_still(process: psutil.Process) -> bool:
    try:  # is_running compares the start time too: a reused pid is not it
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
