"""`rlmm segments list` over two leaders' overlapping copies: each offset is served by
one segment only, and the lineage decides which (superseded copies serve nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.rlmm.archive.archive_data import PARTITIONS
from tests.rlmm.cli.store import run_cli
from tests.rlmm.spark.spark_data import write_leader_change


def test_segments_list_says_which_offsets_each_copy_serves(tmp_path: Path) -> None:
    config, keys = write_leader_change(tmp_path)
    toml = tmp_path / "rlmm.toml"
    toml.write_text(f'data_dir = "{config.data_dir}"\n[eventlog]\npartitions = {PARTITIONS}\n')
    listed = run_cli("segments", "list", "--json", "--config", str(toml))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["segments"]
    served = sorted(
        (r["serves"]["first_offset"], r["serves"]["last_offset"]) for r in rows if r["serves"]
    )
    offsets = [o for first, last in served for o in range(first, last + 1)]
    assert offsets == list(range(len(keys)))  # every offset once, none twice
    superseded = [r for r in rows if r["serves"] is None]
    assert len(rows) == 4 and len(superseded) >= 1  # the retried copy, at least
    for r in rows:
        if r["serves"]:
            assert r["start_offset"] <= r["serves"]["first_offset"]
            assert r["serves"]["last_offset"] <= r["end_offset"]
    table = run_cli("segments", "list", "--config", str(toml))
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[0]
    assert header.split()[-1] == "serves"
