"""The demo's pipeline: Kafka log dirs -> `rlmm offload` -> local store -> restart -> expiry,
and what it prints: the table `rlmm segments list` prints right after it, the same."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlmm.cli.demo import RETENTION_BYTES, main, offload, write_config, write_logs


async def test_demo_offloads_restarts_expires_and_writes_expectations(tmp_path: Path) -> None:
    pdirs = write_logs(tmp_path / "kafka-logs")
    config_path = write_config(tmp_path)
    run = await offload(config_path, tmp_path / "kafka-logs", pdirs)
    result = run.summary
    rolled = {f"{p.topic}-{p.partition}": len(p.segments()) - 1 for p in pdirs}
    assert result["segments copied"] == run.copied == sum(rolled.values())
    assert result["objects identical to local files"] >= 5 * sum(rolled.values())
    assert "0 events replayed" in str(result["restart from snapshot"])
    expired = result["segments expired by retention"]
    assert expired == sum(len(v) for v in run.expired.values()) > 0
    assert result["segments in remote storage"] == run.copied - expired
    assert {v.reason for vs in run.expired.values() for v in vs} == {"retention.bytes"}
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


def test_the_demo_lists_what_segments_list_prints_after_it_and_says_what_expired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new operator saw the demo list 33 segments as COPY_FINISHED, `{0: 0}` and raw
    bytes, then `rlmm segments list` 28 as COPY_SEGMENT_FINISHED, `0@0` and KiB, with
    nothing saying retention ran in between. The demo's table is now the command's, run
    right after it, line for line; and a line says what retention expired and why."""
    data_dir = tmp_path / "demo-data"
    assert main(["--data-dir", str(data_dir)]) == 0
    demo = capsys.readouterr().out.splitlines()
    listed = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "segments", "list",
         "--config", str(data_dir / "demo.toml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    cli = listed.stdout.splitlines()
    count = re.fullmatch(r"(\d+) segments, .*iB", cli[-1])
    assert count is not None and len(cli) == int(count.group(1)) + 2  # header, rows, count
    at = demo.index(cli[0])  # the header
    assert demo[at : at + len(cli)] == cli
    text = "\n".join(demo)
    # Kafka's state names, epoch@offset, sizes in KiB: nowhere the demo's old formats
    assert "COPY_SEGMENT_FINISHED" in text and not re.search(r"\bCOPY_FINISHED\b", text)
    assert " 0@0 " in text and "{0: 0}" not in text
    # the count the demo copied, what retention took and what is left agree, and are said
    summary = re.search(r"segments copied\s+\W\s+(\d+)", text)
    assert summary is not None
    copied = int(summary.group(1))
    expiry = next(line for line in demo if line.startswith("retention expired "))
    gone = int(expiry.split()[2])
    assert gone > 0 and copied - gone == int(count.group(1))
    assert expiry.startswith(f"retention expired {gone} of the {copied} segments copied")
    assert f"retention.bytes={RETENTION_BYTES['clicks']}" in expiry
    assert "clicks-0 offsets 0.." in expiry and "orders" not in expiry
    assert demo.index(expiry) < at  # said before the listing that lacks them
