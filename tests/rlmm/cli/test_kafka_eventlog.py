"""The ops CLI over a Kafka event log (Tansu on loopback): `events` decodes the
metadata topic and `segments list` matches what was offloaded, as a user runs them."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest

from rlmm.config import load_config
from rlmm.ops.describe import segment_fields
from tests.fixtures.ports import free_port
from tests.rlmm.archive.archive_data import offload
from tests.rlmm.cli.store import run_cli, sid, write_partition


@pytest.mark.kafka
def test_events_and_segments_over_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"rlmm-ops-{uuid.uuid4().hex[:8]}"
    config_path = tmp_path / "kafka.toml"
    config_path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        "[snapshot]\nenabled = false\n"
        f'[eventlog]\ntype = "kafka"\nbootstrap_servers = "{kafka_bootstrap}"\n'
        f'topic = "{topic}"\npartitions = 4\nreplication_factor = 1\n'
    )
    config = load_config(config_path, env={})
    pdirs = [write_partition(tmp_path / "logs", "orders", p, 2) for p in (0, 1)]
    copied = asyncio.run(offload(config, pdirs))
    segments = [m for tp in sorted(copied, key=lambda t: t.partition) for m in copied[tp]]

    events = run_cli("events", "--config", str(config_path))
    assert events.returncode == 0, events.stderr
    decoded = [json.loads(line) for line in events.stdout.splitlines()]
    assert sorted((e["segment_id"], e["state"]) for e in decoded) == sorted(
        (sid(m), s) for m in segments for s in ("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED")
    )
    listed = run_cli("segments", "list", "--json", "--config", str(config_path))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["segments"]
    assert all(r.pop("serves") is not None for r in rows)  # every copy serves its offsets
    assert rows == [segment_fields(m) for m in segments]


@pytest.mark.parametrize(
    ("bootstrap", "reason"),
    [
        (f"127.0.0.1:{free_port()}", "refused the connection"),
        ("nosuchhost.invalid:9092", "the name nosuchhost.invalid does not resolve"),
    ],
    ids=["refused", "unknown-host"],
)
def test_a_wrong_bootstrap_address_fails_within_seconds_in_one_line(
    tmp_path: Path, bootstrap: str, reason: str
) -> None:
    """No wait set: a read command gives up within seconds (not the 30 s of before), in
    one line that says why; the wait stays a setting (Kafka's name works)."""
    config = tmp_path / "kafka.toml"
    config.write_text(
        f'data_dir = "{tmp_path}"\n[eventlog]\ntype = "kafka"\nbootstrap_servers = "{bootstrap}"\n'
    )
    started = time.monotonic()
    done = run_cli("segments", "list", "--config", str(config))
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert reason in line and bootstrap in line, line
    assert line.count("KafkaConnectionError") <= 1, line
    assert took < 15, f"{took:.1f}s"
    if "refused" in reason:
        wait = "remote.log.metadata.initialization.retry.max.timeout.ms=1500"
        longer = run_cli("segments", "list", "--config", str(config), "--set", wait)
        assert "not reachable within 1500 ms" in longer.stderr, longer.stderr
