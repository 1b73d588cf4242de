"""The demo's pipeline: Kafka log dirs -> `rlmm offload` -> local store -> restart -> expiry."""

from __future__ import annotations

import json
from pathlib import Path

from rlmm.cli.demo import offload, write_config, write_logs


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


async def test_demo_topics_have_one_id_and_tools_group_by_it(tmp_path: Path) -> None:
    """As in Kafka, every partition of a demo topic shares its topic id; the CLI and the
    archive see one topic with all its partitions."""
    import subprocess
    import sys

    from rlmm.archive import open_metadata_view
    from rlmm.config import load_config

    pdirs = write_logs(tmp_path / "kafka-logs")
    ids: dict[str, set[object]] = {}
    for p in pdirs:
        ids.setdefault(p.topic, set()).add(p.topic_id_partition().topic_id)
    assert all(len(v) == 1 for v in ids.values()) and len(set().union(*ids.values())) == 2
    config_path = write_config(tmp_path)
    await offload(config_path, tmp_path / "kafka-logs", pdirs)
    with open_metadata_view(load_config(config_path, env={})) as view:
        tps = view.topic_partitions()
    assert {(tp.topic, tp.partition) for tp in tps} == {(p.topic, p.partition) for p in pdirs}
    assert {tp.topic: tp.topic_id for tp in tps} == {t: next(iter(v)) for t, v in ids.items()}
    listed = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "partitions", "--json", "--config", str(config_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    parts = json.loads(listed.stdout)["partitions"]
    assert sorted((p["topic"], p["partition"]) for p in parts) == sorted(
        (p.topic, p.partition) for p in pdirs
    )
    assert len({p["topic_id"] for p in parts if p["topic"] == "orders"}) == 1
