"""The text form of a restore's plan and summary (ConsoleOutput.restore renders it).

Invariant: the table has one row per source partition, with the same numbers as the
JSON document (``RestoreReport.to_dict``); the lines after it say what was or would be
done, naming the target, the progress topic and anything the operator must know
(gaps, where the archive ends and what it therefore lacks, the target's configs and
offset map (``rlmm.cli._restore_changes``), batches re-encoded and why, LogAppendTime
timestamps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.table import Table

from rlmm.cli._restore_changes import change_lines
from rlmm.cli.units import human_bytes, human_time

if TYPE_CHECKING:
    from rlmm.restore import RestoreReport


def _targets(partitions: list[int], count: int) -> str:
    if len(partitions) == count and count > 1:
        return f"0..{count - 1} (by key)"
    return ",".join(map(str, partitions))


def _created(report: RestoreReport) -> str:
    if report.target_exists:
        return ""
    return ", to be created" if report.dry_run else ", created"


def _archive_end(topic: str, p: dict[str, Any]) -> str:
    """``dr-0 after offset 3012 (newest record 2026-11-29 05:30:00Z)``."""
    ts = p["archive_newest_timestamp_ms"]
    newest = "no record timestamp" if ts is None else f"newest record {human_time(ts)}"
    return f"{topic}-{p['partition']} after offset {p['archive_end_offset'] - 1} ({newest})"


def restore_lines(
    report: RestoreReport, new_table: Callable[..., Table]
) -> tuple[Table, list[str]]:
    """The table of a restore's partitions and the lines that follow it."""
    data = report.to_dict()
    return _table(report, data, new_table), _lines(report, data)


def _table(report: RestoreReport, data: dict[str, Any], new_table: Callable[..., Table]) -> Table:
    plan = data["plan"]
    results = {r["partition"]: r for r in data.get("partitions", [])}
    columns = ["partition", "offsets", "from", "segments", "bytes", "offsets_left", "target"]
    if not report.dry_run:
        columns += ["records", "next_offset", "done"]
    table = new_table(
        *columns,
        right=("partition", "from", "segments", "bytes", "offsets_left", "records", "next_offset"),
    )
    for p in plan["partitions"]:
        row = [
            str(p["partition"]),
            f"[{p['first_offset']}, {p['end_offset']})",
            str(p["start_offset"]),
            str(p["segments"]),
            human_bytes(p["bytes"]),
            str(p["offsets"]),
            _targets(p["target_partitions"], plan["target"]["partition_count"]),
        ]
        if not report.dry_run:
            r = results.get(p["partition"], {})
            row += [str(r.get("records", 0)), str(r.get("next_offset", "-")),
                    "yes" if r.get("done") else "no"]  # fmt: skip
        table.add_row(*row)
    return table


def _lines(report: RestoreReport, data: dict[str, Any]) -> list[str]:
    from rlmm.restore.report import partitions_text  # loaded with the report's module

    plan = data["plan"]
    source, target = plan["source"], plan["target"]
    lines = [
        f"source: {source['topic']} (topic id {source['topic_id']},"
        f" {partitions_text(source['partition_count'])}; segments from the"
        f" {source['metadata']}) in {source['store']}",
        f"target: {target['topic']} ({partitions_text(target['partition_count'])}, partitioner"
        f" {target['partitioner']}{_created(report)});"
        f" progress in {report.progress_topic}, transactional id {report.transactional_id}",
    ]
    for p in plan["partitions"]:
        for g in p["gaps"]:
            lines.append(
                f"gap: {source['topic']}-{p['partition']} offsets [{g['first_offset']},"
                f" {g['last_offset'] + 1}) are missing from the archive"
                + (" (the restore stops there)" if p["stops_at_gap"] else " (skipped)")
            )
    ends = [
        _archive_end(source["topic"], p)
        for p in plan["partitions"]
        if p.get("archive_end_offset") is not None
    ]
    if ends:
        lines.append(
            f"archive ends: {', '.join(ends)}: records written after these were never"
            " archived (each partition's active segment at the time of the loss, and"
            " anything later)"
        )
    lines += change_lines(report, data)
    if report.dry_run:
        lines.append(
            f"dry run: {plan['segments']} segments, {human_bytes(plan['bytes'])}, at most"
            f" {plan['offsets']} records to restore"
            + (" (resuming)" if report.resumed else "")
            + "; nothing written"
        )
        return lines
    rate = data["records_per_s"]
    lines.append(
        f"restored {data['records']} records in {data['elapsed_s']:.1f} s"
        + (f" ({rate:,.0f} records/s)" if rate else "")
        + (" (resumed)" if report.resumed else "")
        + ("; done" if data["done"] else "")
    )
    if data["batches_passed_through"] or data["batches_reencoded"]:
        why = ", ".join(f"{n} {reason}" for reason, n in data["reencoded"].items())
        lines.append(
            f"batches: {data['batches_passed_through']} archived batches sent as they are,"
            f" {data['batches_reencoded']} decoded and re-encoded" + (f" ({why})" if why else "")
        )
    if data["log_append_time_records"]:
        lines.append(
            f"note: {data['log_append_time_records']} records had LogAppendTime timestamps in"
            " the source: they were written with that time as their CreateTime"
        )
    return lines
