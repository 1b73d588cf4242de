"""What the archive does not hold, in a restore's plan and summary (issue 46, item 1).

A partition's active segment is never copied (as in Kafka): 260,000 records were
produced, 254,510 archived and restored, and the restore said "done" with nothing on
the other 5,490. Invariants checked: each partition's plan says where its archive ends
(the base of the segment that was active when the archive was last copied to, whatever
the range restored) and the largest timestamp of its last archived segment; the JSON
plan carries both; the text summary, of a dry run and of a run, names them in one line
that says the records after them were never archived.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from rich.table import Table

from remote.segments import PartitionDir
from rlmm.archive import open_metadata_view, remote_storage_for
from rlmm.cli._restore_text import restore_lines
from rlmm.config import RlmmConfig
from rlmm.restore import PartitionResult, RestorePlan, RestoreReport, RestoreSelection, build_plan
from tests.rlmm.archive.archive_data import make_config, offload
from tests.rlmm.archive.archive_data import write_history as history

TOPIC = "tail"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[RlmmConfig, list[PartitionDir]]:
    tmp = tmp_path_factory.mktemp("archive-end")
    config = make_config(tmp / "rlmm")
    topic_id = uuid.uuid4()
    for p in (0, 1):
        history(tmp / "logs", TOPIC, p, topic_id=topic_id, segment_records=100 + 40 * p)
    pdirs = [PartitionDir(d) for d in sorted((tmp / "logs").iterdir())]
    asyncio.run(offload(config, pdirs))
    return config, pdirs


def plan(config: RlmmConfig, selection: RestoreSelection) -> RestorePlan:
    options = config.remote_options()
    with open_metadata_view(config) as view:
        return build_plan(
            view, remote_storage_for(options), options, selection, metadata_source="metadata"
        )


def test_each_partition_plan_says_where_the_archive_ends(archive: Any) -> None:
    config, pdirs = archive
    whole = plan(config, RestoreSelection(TOPIC))
    ranged = plan(config, RestoreSelection(TOPIC, to_offset=120))  # ends inside the archive
    for p, pdir in enumerate(pdirs):
        *rolled, active = pdir.segments()
        assert active.base_offset <= active.summary().end_offset  # it holds records
        newest = rolled[-1].summary().max_timestamp_ms
        for got in (whole.partitions[p], ranged.partitions[p]):
            assert got.archive_end_offset == active.base_offset, p
            assert got.archive_newest_timestamp_ms == newest, p
        assert ranged.partitions[p].end_offset == 120
        data = whole.to_dict()["partitions"][p]
        assert data["archive_end_offset"] == active.base_offset
        assert data["archive_newest_timestamp_ms"] == newest


def test_the_summary_names_what_the_archive_lacks(archive: Any) -> None:
    config, pdirs = archive
    p = plan(config, RestoreSelection(TOPIC, target_topic="restored"))
    ends = [d.segments()[-1].base_offset for d in pdirs]
    assert ends[0] != ends[1]
    dry = RestoreReport(p, 2, False, "rlmm-restore-restored-0", "__rlmm_restore", dry_run=True)
    done = RestoreReport(p, 2, True, "rlmm-restore-restored-0", "__rlmm_restore")
    done.results = [PartitionResult(q.source.partition, 0, q.end_offset, q.end_offset,
                                    records=q.end_offset) for q in p.partitions]  # fmt: skip
    done.elapsed_s = 1.0
    for report in (dry, done):
        _, lines = restore_lines(report, lambda *columns, right=(): Table(*columns))
        (line,) = [ln for ln in lines if ln.startswith("archive ends: ")]
        for q, end in zip(p.partitions, ends, strict=True):
            ts = q.archive_newest_timestamp_ms
            assert ts is not None
            named = f"{TOPIC}-{q.source.partition} after offset {end - 1} (newest record"
            assert f"{named} {_utc(ts)})" in line, line
        assert line.endswith(
            "records written after these were never archived (each partition's active"
            " segment at the time of the loss, and anything later)"
        ), line


def _utc(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
