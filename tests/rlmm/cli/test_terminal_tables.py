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
