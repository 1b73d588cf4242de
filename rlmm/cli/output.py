"""How the `rlmm` command shows results: one Output per run, text tables or JSON.

After PyIceberg's ``cli/output.py``: a small ``Output`` ABC with one method per kind
of result; ``ConsoleOutput`` prints aligned tables with sizes and times in human
units, ``JsonOutput`` prints exactly one JSON document on stdout (streams — events,
records — print one JSON object per line). Invariant: stdout carries only results;
errors, warnings and progress go to stderr; JSON field names are the stable ones of
``rlmm.ops.describe`` and of each result's ``to_dict``.
"""

from __future__ import annotations

import abc
import io
import json
import logging
import sys
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from rlmm.cli._restore_text import restore_lines
from rlmm.cli.units import human_age, human_bytes, human_time
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, kafka_uuid_to_str
from rlmm.ops.describe import segment_fields
from rlmm.ops.event_dump import DumpedEvent
from rlmm.ops.inventory import PartitionSummary, SegmentDetail
from rlmm.ops.repair import NOT_OURS, RepairPlan
from rlmm.ops.snapshot_report import SnapshotReport
from rlmm.ops.verification import VerifyReport

if TYPE_CHECKING:  # the restore library loads aiokafka: only `rlmm restore` needs it
    from rlmm.restore import OffsetTranslations, RestoreReport


def _log_time() -> str:
    """Now, as logging's %(asctime)s renders it (local time, ``2026-11-29 05:30:00,123``)."""
    return logging.Formatter().formatTime(logging.makeLogRecord({}))


def _duration(seconds: float) -> str:
    """90 -> 90s, 1800 -> 30m, 3600 -> 1h (as --safety-window takes them)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def json_line(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


class Output(abc.ABC):
    """One method per kind of result."""

    @abc.abstractmethod
    def error(self, message: str, kind: str) -> None: ...

    @abc.abstractmethod
    def config(self, data: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def segments(
        self,
        segments: list[RemoteLogSegmentMetadata],
        serves: Mapping[RemoteLogSegmentId, tuple[int, int]] | None = None,
    ) -> None:
        """``serves``: the offsets each segment serves on the lineage (absent: none)."""

    @abc.abstractmethod
    def segment_detail(self, detail: SegmentDetail) -> None: ...

    @abc.abstractmethod
    def partitions(self, summaries: list[PartitionSummary]) -> None: ...

    @abc.abstractmethod
    def snapshots(self, reports: list[SnapshotReport]) -> None: ...

    @abc.abstractmethod
    def verification(self, report: VerifyReport) -> None: ...

    @abc.abstractmethod
    def repair(self, plan: RepairPlan) -> None: ...

    @abc.abstractmethod
    def restore(self, report: RestoreReport) -> None:
        """A restore's plan (a dry run) or its summary."""

    @abc.abstractmethod
    def restores(self, reports: list[RestoreReport]) -> None:
        """A run's reports, one per topic: one alone as ``restore`` shows it."""

    @abc.abstractmethod
    def offset_translations(self, result: OffsetTranslations) -> None:
        """Source offsets of a restored topic translated through its offset map."""

    def event(self, item: DumpedEvent) -> None:
        """Events are a stream of JSON lines in both modes (for jq and for reading)."""
        sys.stdout.write(json_line(item.to_dict()) + "\n")
        sys.stdout.flush()

    def record(self, data: dict[str, Any]) -> None:
        sys.stdout.write(json_line(data) + "\n")


class JsonOutput(Output):
    def _print(self, data: Any) -> None:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")

    def error(self, message: str, kind: str) -> None:
        self._print({"error": {"type": kind, "message": message}})

    def config(self, data: dict[str, Any]) -> None:
        self._print(data)

    def segments(
        self,
        segments: list[RemoteLogSegmentMetadata],
        serves: Mapping[RemoteLogSegmentId, tuple[int, int]] | None = None,
    ) -> None:
        rows = []
        for m in segments:
            row = segment_fields(m)
            if serves is not None:
                span = serves.get(m.remote_log_segment_id)
                row["serves"] = (
                    None if span is None else {"first_offset": span[0], "last_offset": span[1]}
                )
            rows.append(row)
        self._print({"segments": rows})

    def segment_detail(self, detail: SegmentDetail) -> None:
        self._print(detail.to_dict())

    def partitions(self, summaries: list[PartitionSummary]) -> None:
        self._print({"partitions": [s.to_dict() for s in summaries]})

    def snapshots(self, reports: list[SnapshotReport]) -> None:
        self._print({"snapshots": [r.to_dict() for r in reports]})

    def verification(self, report: VerifyReport) -> None:
        self._print(report.to_dict())

    def repair(self, plan: RepairPlan) -> None:
        self._print(plan.to_dict())

    def restore(self, report: RestoreReport) -> None:
        self._print(report.to_dict())

    def restores(self, reports: list[RestoreReport]) -> None:
        if len(reports) == 1:
            self.restore(reports[0])
        else:
            self._print({"topics": [r.to_dict() for r in reports]})

    def offset_translations(self, result: OffsetTranslations) -> None:
        self._print(result.to_dict())


def _render(table: Table, width: int) -> list[str]:
    console = Console(highlight=False, soft_wrap=False, width=width, file=io.StringIO())
    with console.capture() as captured:
        console.print(table)
    return [line.rstrip() for line in captured.get().splitlines()]


def _fold(table: Table) -> list[str]:
    """One block per row: ``column: value`` lines, a blank line between rows."""
    headers = [str(c.header) for c in table.columns]
    columns = [[str(cell) for cell in c.cells] for c in table.columns]
    pad = max(map(len, headers), default=0) + 1
    out: list[str] = []
    for row in range(table.row_count):
        if row:
            out.append("")
        out.extend(f"{h + ':':<{pad}} {col[row]}" for h, col in zip(headers, columns, strict=True))
    return out


def _epochs(epochs: Any) -> str:
    return ",".join(f"{e}@{o}" for e, o in epochs.items())


class ConsoleOutput(Output):
    """Tables for people. A cell is never cut: piped output keeps a row on one line (for
    grep and awk); on a terminal too narrow for a table, each row is folded into a block
    of ``column: value`` lines (as ``kubectl describe`` does), so every id and object key
    can be copied whole; ``wide`` keeps rows on one line on a terminal too."""

    def __init__(
        self, *, wide: bool = False, width: int | None = None, timed: bool = False
    ) -> None:
        self.timed = timed  # the error line starts with the time, as the log lines do
        self._terminal = width is not None or sys.stdout.isatty()
        self._wide = wide or not self._terminal
        self.out = Console(
            highlight=False, soft_wrap=False, width=(width if self._terminal else 1000)
        )

    def _print_table(self, table: Table) -> None:
        lines = _render(table, 10_000)
        if not self._wide and max(map(len, lines), default=0) > self.out.width:
            lines = _fold(table)
        # Rich pads the last column; trailing blanks only get in the way of grep and diff.
        self.out.file.write("".join(line + "\n" for line in lines))

    def _table(self, *columns: str, right: tuple[str, ...] = ()) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in columns:
            table.add_column(col, justify="right" if col in right else "left", no_wrap=True)
        return table

    def error(self, message: str, kind: str) -> None:
        # Plain write: one line, never wrapped to the terminal width.
        stamp = f"{_log_time()} " if self.timed else ""
        sys.stderr.write(f"{stamp}error: {message}\n")

    def config(self, data: dict[str, Any]) -> None:
        self.out.print(json.dumps(data, indent=2, default=str), markup=False)

    def segments(
        self,
        segments: list[RemoteLogSegmentMetadata],
        serves: Mapping[RemoteLogSegmentId, tuple[int, int]] | None = None,
    ) -> None:
        columns = ["topic", "partition", "segment_id", "start_offset", "end_offset", "epochs",
                   "size", "state", "max_timestamp"]  # fmt: skip
        if serves is not None:
            columns.append("serves")
        table = self._table(*columns, right=("partition", "start_offset", "end_offset", "size"))
        for m in segments:
            tp = m.topic_id_partition
            cells = [
                tp.topic, str(tp.partition), kafka_uuid_to_str(m.remote_log_segment_id.id),
                str(m.start_offset), str(m.end_offset), _epochs(m.segment_leader_epochs),
                human_bytes(m.segment_size_in_bytes), m.state.name, human_time(m.max_timestamp_ms),
            ]  # fmt: skip
            if serves is not None:
                span = serves.get(m.remote_log_segment_id)
                cells.append("-" if span is None else f"{span[0]}-{span[1]}")
            table.add_row(*cells)
        self._print_table(table)
        total = sum(m.segment_size_in_bytes for m in segments)
        self.out.print(f"{len(segments)} segments, {human_bytes(total)}")

    def segment_detail(self, detail: SegmentDetail) -> None:
        fields = segment_fields(detail.metadata)
        for name in ("max_timestamp_ms", "event_timestamp_ms"):
            fields[name] = f"{fields[name]} ({human_time(fields[name])})"
        fields["segment_size_in_bytes"] = (
            f"{fields['segment_size_in_bytes']} ({human_bytes(fields['segment_size_in_bytes'])})"
        )
        fields["segment_leader_epochs"] = _epochs(detail.metadata.segment_leader_epochs)
        width = max(len(k) for k in fields)
        for key, value in fields.items():
            self.out.print(f"{key:<{width}}  {value}", markup=False)
        self.out.print()
        objects = self._table("object", "kind", "stored", "recorded", "crc32c", "last_modified")
        for o in detail.objects:
            d = o.to_dict()
            stored = "MISSING" if o.stored_size is None else human_bytes(o.stored_size)
            objects.add_row(
                o.name, d["kind"], stored,
                human_bytes(o.recorded_size), d["recorded_crc32c"] or "-",
                human_time(o.last_modified_ms),
            )  # fmt: skip
        self._print_table(objects)
        self.out.print()
        events = self._table(
            "metadata_partition", "offset", "type", "state", "event_time", "broker_id"
        )
        for e in detail.events:
            d = e.to_dict()
            events.add_row(
                str(e.metadata_partition), str(e.offset), d.get("type", "-"), d.get("state", "-"),
                human_time(d.get("event_timestamp_ms")), str(d.get("broker_id", "-")),
            )  # fmt: skip
        self._print_table(events)

    def partitions(self, summaries: list[PartitionSummary]) -> None:
        table = self._table(
            "topic", "partition", "segments", "remote", "offsets", "highest_offset_per_epoch",
            "states", "delete_state", "gaps", "newest_age",
            right=("partition", "segments", "remote", "newest_age"),
        )  # fmt: skip
        for s in summaries:
            tp = s.topic_id_partition
            offsets = "-" if s.start_offset is None else f"{s.start_offset}..{s.end_offset}"
            table.add_row(
                tp.topic, str(tp.partition), str(s.segment_count), human_bytes(s.remote_bytes),
                offsets, _epochs(s.highest_offset_per_epoch) or "-",
                " ".join(f"{k}={v}" for k, v in s.state_counts.items()) or "-",
                s.delete_state or "-", str(len(s.gaps)), human_age(s.newest_age_s),
            )  # fmt: skip
        self._print_table(table)
        if any(s.newest_timestamp_ms is not None for s in summaries):
            self.out.print(
                "newest_age: since the newest archived record; records written after it"
                " (the active segment when the archive was last copied to) are not archived",
                markup=False,
            )

    def snapshots(self, reports: list[SnapshotReport]) -> None:
        if not reports:
            self.out.print("no snapshot files")
        for r in reports:
            self.out.print(f"[bold]{r.path}[/]  {human_bytes(r.size_bytes)}")
            if not r.ok:
                self.out.print(f"  CORRUPT: {r.problem}", markup=False)
                continue
            applied = ", ".join(f"{p}:{o}" for p, o in sorted(r.applied_offsets.items()))
            self.out.print(
                f"  format_version {r.format_version}, checksum ok, created "
                f"{human_time(r.created_ms)}\n"
                f"  partition_count {r.partition_count}, applied_offsets {{{applied}}}\n"
                f"  {r.user_partitions} user partitions, {r.segments} segments "
                f"({', '.join(f'{k}={v}' for k, v in r.segments_by_state.items()) or 'none'}), "
                f"{human_bytes(r.remote_bytes)} remote",
                markup=False,
            )
            if r.partition_delete_states:
                self.out.print(f"  partition deletes: {r.partition_delete_states}", markup=False)

    def _problems(self, rows: list[dict[str, Any]], extra: str | None = None) -> None:
        columns = [
            c for c in (extra, "kind", "topic", "partition", "segment_id", "object_name") if c
        ]
        table = self._table(*columns, "detail")
        for row in rows:
            table.add_row(*(str(row.get(c, "-")) for c in columns), str(row["detail"]))
        self._print_table(table)

    def _line(self, text: str, indent: int = 0) -> None:
        """One line of prose. On a terminal (without --wide) it is wrapped between words
        at the terminal's width, continuation lines indented by ``indent``; piped, it
        stays one line (for grep)."""
        if self._wide:
            lines = [text]
        else:
            lines = textwrap.wrap(
                text,
                width=self.out.width,
                subsequent_indent=" " * indent,
                break_long_words=False,
                break_on_hyphens=False,
            ) or [text]
        self.out.file.write("".join(line + "\n" for line in lines))

    def _remedies(self, rows: list[dict[str, Any]]) -> None:
        """One line per problem kind present: what to do about it."""
        seen: dict[str, str] = {}
        for row in rows:
            seen.setdefault(str(row["kind"]), str(row["remedy"]))
        for kind, remedy in seen.items():
            self._line(f"  {kind}: {remedy}", indent=4)

    def verification(self, report: VerifyReport) -> None:
        mode = "deep" if report.deep else "quick"
        summary = (
            f"{mode} verify: {report.segments_checked} segments, {report.objects_checked} objects"
            + (f", {human_bytes(report.bytes_read)} read" if report.deep else "")
        )
        rows = [p.to_dict() for p in report.problems]
        if report.ok:
            self._line(f"{summary}: OK")
        else:
            self._problems(rows)
            self._line(f"{summary}: {len(report.problems)} problem(s)")
        # Only the orphan and stale-upload checks skip what is young: every segment's
        # objects were checked all the same.
        if report.skipped_young:
            self._line(
                f"  not judged as orphans yet: {report.skipped_young} objects younger than"
                f" the safety window ({_duration(report.safety_window_s)})",
                indent=4,
            )
        if report.skipped_outside_layout:
            self._line(
                f"  left alone: {report.skipped_outside_layout} stored names outside the"
                " layout's pattern",
                indent=4,
            )
        self._remedies(rows)

    def repair(self, plan: RepairPlan) -> None:
        if plan.actions:
            self._problems([a.to_dict() for a in plan.actions], extra="action")
        if not plan.actions:
            self.out.print("gc: no garbage to remove" + (" of rlmm's" if plan.not_ours else ""))
        elif plan.applied:
            skipped = f", {len(plan.skipped)} skipped" if plan.skipped else ""
            self.out.print(f"gc: {len(plan.done)} of {len(plan.actions)} action(s) done{skipped}")
        else:
            self.out.print(
                f"gc: dry run, {len(plan.actions)} action(s) planned (--apply to repair)"
            )
        for action, why in plan.skipped:
            self.out.print(f"  skipped {action.problem.segment_id}: {why}", markup=False)
        for problem in plan.not_ours:
            self.out.print(
                f"  left alone {problem.segment_id} ({problem.kind.value}): {NOT_OURS}",
                markup=False,
            )
        for caution in plan.cautions:
            self.out.print(f"caution: {caution}", markup=False)
        if plan.left_alone:
            self.out.print(
                f"{len(plan.left_alone)} problem(s) are not garbage and need an operator:"
            )
            rows = [p.to_dict() for p in plan.left_alone]
            self._problems(rows)
            self._remedies(rows)

    def restore(self, report: RestoreReport) -> None:
        table, lines = restore_lines(report, self._table)
        self._print_table(table)
        for line in lines:
            self.out.print(line, markup=False)

    def restores(self, reports: list[RestoreReport]) -> None:
        for i, report in enumerate(reports):
            if i:
                self.out.print()
            self.restore(report)

    def offset_translations(self, result: OffsetTranslations) -> None:
        from rlmm.cli._offsets_text import translation_lines

        table, lines = translation_lines(result, self._table)
        self._print_table(table)
        for line in lines:
            self.out.print(line, markup=False)


__all__ = ["ConsoleOutput", "JsonOutput", "Output", "human_bytes", "human_time"]
