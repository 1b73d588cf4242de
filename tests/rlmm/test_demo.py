"""The demo's pipeline: Kafka log dirs -> `rlmm offload` -> local store -> restart -> expiry."""

from __future__ import annotations

import json
from pathlib import Path

from rlmm.demo import offload, write_config, write_logs


async def test_demo_offloads_restarts_expires_and_writes_expectations(tmp_path: Path) -> None:
    pdirs = write_logs(tmp_path / "kafka-logs")
    config_path = write_config(tmp_path)
    result = await offload(config_path, tmp_path / "kafka-logs", pdirs)
    rolled = {f"{p.topic}-{p.partition}": len(p.segments()) - 1 for p in pdirs}
    assert result["segments copied"] == sum(rolled.values())
    assert result["objects identical to local files"] >= 5 * sum(rolled.values())
    assert "0 events replayed" in str(result["restart from snapshot"])
    assert int(result["segments deleted by retention.bytes"]) > 0
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert expected["config"] == str(config_path)
    orders, clicks = (
        expected["topics"]["orders"]["partitions"],
        expected["topics"]["clicks"]["partitions"],
    )
    # every rolled orders segment is archived; the aborted transaction only counts uncommitted
    assert orders["0"]["archived_segments"] == rolled["orders-0"]
    assert orders["0"]["aborted_records"] == 30 and orders["0"]["control_records"] == 2
    assert orders["0"]["read_committed"] == orders["0"]["read_uncommitted"] - 30
    assert orders["1"]["read_committed"] == orders["1"]["read_uncommitted"]
    # retention.bytes removed the oldest clicks segments: the archive starts later
    for p in ("0", "1"):
        assert 0 < clicks[p]["archived_segments"] < rolled[f"clicks-{p}"]
        assert clicks[p]["start_offset"] > 0
        span = clicks[p]["end_offset"] - clicks[p]["start_offset"] + 1
        assert clicks[p]["read_uncommitted"] == span
