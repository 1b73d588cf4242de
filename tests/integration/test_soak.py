"""The short soak (bench/soak.py for 150 s, run in the background from the session's
start by tests/fixtures/soak.py): everything failing at once, nothing lost.

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

import psutil
import pytest

from tests.fixtures.soak import BackgroundSoak

pytestmark = [
    pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.timeout(600),
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
