"""The short soak (bench/soak.py for 150 s): everything failing at once, nothing lost.

Invariant checked: on a real Apache Kafka 4.1.1 broker with producers of every codec,
keys, headers and aborted transactions, Kafka deleting local segments, the sidecar
SIGKILLed and restarted, S3 faults and a storm of them, and one broker SIGKILL, the
archive ends up equal to what Kafka consumers read (both isolation levels; nothing
lost, nothing twice), the crash leftovers are found by verify and removed by gc
exactly, remote retention expired what it should, the copy-errors alert fired during
the storm and resolved after it (its windows scaled by 0.25 to fit the short run;
the sidecar is not killed during the storm here, as each restart pauses its errors
for longer than a scaled window), every
dashboard query has data, and no process outlives the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.fixtures.prometheus import PrometheusTools

pytestmark = [
    pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.timeout(600),
]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
DURATION_S = 150


def test_short_soak(
    apache_kafka_libs: Path, prometheus_bin: PrometheusTools, tmp_path: Path
) -> None:
    work = tmp_path / "soak"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", str(DURATION_S),
         "--seed", "19", "--no-kills-in-storm", "--alert-scale", "0.25", "--storm", "0.1,0.65",
         "--broker-restart-at", "0.7", "--kills-end", "0.75", "--work", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=540)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert out.strip(), f"no report (exit {proc.returncode}):\n{err[-4000:]}"
    report = json.loads(out)
    summary = {k: v for k, v in report.items() if k not in ("partitions", "machine", "settings")}
    assert report["ok"], f"{report['failures']}\n{json.dumps(summary, indent=1)[:6000]}"
    assert proc.returncode == 0
    assert report["records_lost"] == report["duplicates"] == report["mismatched"] == 0
    assert report["records_compared"] > 5000
    assert report["kills"]["total"] >= 2 and report["broker_restarts"] == 1
    assert sum(report["faults_injected"].values()) > 50
    assert report["segments_copied"] > 50 and report["segments_expired"] > 0
    assert (
        report["verify"]["leftovers_found"] and report["verify"]["gc_removed_exactly_the_leftovers"]
    )
    assert report["verify"]["after_gc_and_clean_round"]["ok"] is True
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
