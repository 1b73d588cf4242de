"""Tables on a terminal never cut what an operator copies: ids, object keys, problem
kinds. A row too wide for the terminal is folded into a block of `column: value` lines;
--wide keeps it on one line; piped output is never cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmm.archive import open_metadata_view
from rlmm.cli.output import ConsoleOutput
from rlmm.model import kafka_uuid_to_str
from rlmm.ops.inventory import list_segments
from rlmm.ops.verification import Problem, ProblemKind, VerifyReport
from tests.rlmm.cli.store import build_store


@pytest.mark.parametrize("width", [80, 160])
def test_ids_keys_and_kinds_are_never_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    store = build_store(tmp_path)
    with open_metadata_view(store.config) as view:
        segments = list_segments(view)
    out = ConsoleOutput(width=width)
    out.segments(segments)
    key = "orders-nUrRfSKCTtKucEzX6gcwnA/0/00000000000000003100-w7BKW6zvSnuQ1Fw7GpsncA.timeindex"
    out.verification(
        VerifyReport([Problem(ProblemKind.MISSING_OBJECT, "orders", 0, "not in remote storage",
                              segment_id="w7BKW6zvSnuQ1Fw7GpsncA", object_name=key)],
                     deep=False, safety_window_s=3600)
    )  # fmt: skip
    text = capsys.readouterr().out
    assert "…" not in text
    for m in segments:
        assert kafka_uuid_to_str(m.remote_log_segment_id.id) in text
    assert key in text and "missing_object" in text and "orders" in text
    table_lines = [line for line in text.splitlines() if not line.startswith("  ")]
    assert all(len(line) <= max(width, len(key) + 20) for line in table_lines)


def test_wide_and_piped_keep_one_line_per_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = build_store(tmp_path)
    with open_metadata_view(store.config) as view:
        segments = list_segments(view)
    ConsoleOutput(width=80, wide=True).segments(segments)
    wide = capsys.readouterr().out.splitlines()
    ConsoleOutput().segments(segments)  # stdout is not a terminal here: piped
    piped = capsys.readouterr().out.splitlines()
    assert wide == piped
    assert len(piped) == len(segments) + 2  # header, rows, the count line
    assert "…" not in "".join(piped)


def _report() -> VerifyReport:
    key = "orders-nUrRfSKCTtKucEzX6gcwnA/0/00000000000000003100-w7BKW6zvSnuQ1Fw7GpsncA.log"
    problems = [
        Problem(kind, "orders", 0, "detail", segment_id="w7BKW6zvSnuQ1Fw7GpsncA", object_name=key)
        for kind in (ProblemKind.MISSING_OBJECT, ProblemKind.LINEAGE_GAP)
    ]
    return VerifyReport(problems, deep=True, safety_window_s=3600, segments_checked=28,
                        objects_checked=141, bytes_read=1_200_000, skipped_young=141,
                        skipped_outside_layout=2)  # fmt: skip


def test_the_verify_summary_says_only_the_orphan_check_skips_young_objects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`(skipped: 141 younger than the safety window)` read as if nothing was checked:
    the summary counts what was checked; what the orphan check left for later is a
    note of its own, with the window."""
    ConsoleOutput().verification(_report())  # piped
    lines = capsys.readouterr().out.splitlines()
    summary = next(line for line in lines if line.startswith("deep verify:"))
    assert summary == "deep verify: 28 segments, 141 objects, 1.1 MiB read: 2 problem(s)"
    assert "  not judged as orphans yet: 141 objects younger than the safety window (1h)" in lines
    assert "  left alone: 2 stored names outside the layout's pattern" in lines
    ok = VerifyReport([], deep=False, safety_window_s=1800, segments_checked=3, skipped_young=4)
    ConsoleOutput().verification(ok)
    assert capsys.readouterr().out.splitlines() == [
        "quick verify: 3 segments, 0 objects: OK",
        "  not judged as orphans yet: 4 objects younger than the safety window (30m)",
    ]


def test_verify_prose_fits_an_80_column_terminal_and_stays_whole_when_piped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a terminal the summary, notes and remedies wrap between words at its width,
    continuation lines indented (the remedies used to run past the edge); piped, each
    remedy stays on one line for grep."""
    report = _report()
    ConsoleOutput(width=80).verification(report)
    text = capsys.readouterr().out
    table_end = text.index("deep verify:")
    prose = text[table_end:].splitlines()
    assert all(len(line) <= 80 for line in prose), [line for line in prose if len(line) > 80]
    remedies = {p.to_dict()["remedy"] for p in report.problems}
    joined = " ".join(line.strip() for line in prose)
    for remedy in remedies:
        assert remedy in joined
    continuation = [line for line in prose if line.startswith("    ")]
    assert continuation, prose  # the long remedies did wrap, under their kind
    ConsoleOutput().verification(report)
    piped = capsys.readouterr().out.splitlines()
    for problem in report.problems:
        kind, remedy = problem.to_dict()["kind"], problem.to_dict()["remedy"]
        assert f"  {kind}: {remedy}" in piped
