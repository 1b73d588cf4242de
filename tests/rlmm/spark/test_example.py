"""examples/spark_read.py: reads the archive on the test session's Spark, checks the
counts of expected.json under both isolation levels (exit 1 on a mismatch), and
without Java says how to get it and exits 0 with a "skipped" line; on the demo's store
it prints exactly the transcript docs/spark.md shows (and the README quotes)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "spark_read.py"
SPARK_DOC = ROOT / "docs" / "spark.md"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_read_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected_json(written: dict[str, Any]) -> dict[str, Any]:
    """What ``make demo`` writes to expected.json, for the history fixture's archive."""
    topics = {}
    for codec in ("none", "zstd"):
        records = written[codec]
        entry = {
            "start_offset": 0,
            "end_offset": records[-1].offset + 1,  # the segment may end with a marker
            "read_uncommitted": len(records),
            "read_committed": sum(not e.aborted for e in records),
            "first_offset": records[0].offset,
            "last_offset": records[-1].offset,
        }
        topics[f"h-{codec}"] = {"topic_id": "-", "partitions": {"0": entry}}
    return {"config": "rlmm.toml", "topics": topics}


@pytest.mark.spark
def test_the_example_checks_the_counts(
    registered: Any, history: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml, written = history
    module = example()
    expected = tmp_path / "expected.json"
    data = expected_json(written)
    expected.write_text(json.dumps(data))
    args = module.parse_args(["--config", str(toml), "--expected", str(expected)])
    assert module.run(registered, args) == 0
    out = capsys.readouterr().out
    assert "OK (read_uncommitted): 2 partitions" in out and "OK (read_committed)" in out
    assert "h-zstd" in out and "value_bytes" in out  # a few rows and the per-partition table
    data["topics"]["h-none"]["partitions"]["0"]["read_committed"] += 1
    data["topics"]["h-zstd"]["partitions"]["0"]["end_offset"] = 5
    expected.write_text(json.dumps(data))
    assert module.run(registered, args) == 1
    out = capsys.readouterr().out
    assert "MISMATCH h-none-0: read" in out and "under read_committed" in out
    assert "MISMATCH h-zstd-0: read offsets 0.." in out and "outside archived 0..5" in out


@pytest.mark.spark
def test_the_spark_doc_shows_what_the_demo_s_spark_step_prints(
    registered: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make demo` runs the demo, then this example on its store: docs/spark.md's
    transcript is that output, line for line (the demo's records are deterministic)."""
    from tests.test_docs import fenced_after

    data = tmp_path / "demo-data"
    subprocess.run(
        [sys.executable, "-m", "rlmm.cli.demo", "--data-dir", str(data)],
        cwd=tmp_path, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    module = example()
    args = module.parse_args(
        ["--config", str(data / "demo.toml"), "--expected", str(data / "expected.json")]
    )
    assert module.run(registered, args) == 0
    printed = capsys.readouterr().out.rstrip("\n").split("\n")
    doc = fenced_after(SPARK_DOC.read_text(), "## The example")
    assert doc[0] == (
        "$ .venv/bin/python examples/spark_read.py --config demo-data/demo.toml"
        " --expected demo-data/expected.json"
    )
    assert doc[1:] == printed, "\n".join(printed)


def test_without_java_the_example_says_how_and_skips(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--config", str(tmp_path / "demo.toml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Java runtime" in done.stdout and "JAVA_HOME" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "spark_read: skipped (no Java runtime)"
