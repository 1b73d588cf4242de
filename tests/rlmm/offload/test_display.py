"""The run's tally: every error counted, only the newest messages kept."""

from __future__ import annotations

import logging

import pytest

from rlmm.offload.display import KEPT_ERRORS, Display
from rlmm.offload.segment_ops import OffloadEvent


def test_errors_are_counted_but_only_the_newest_messages_are_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A sidecar under storage failing for days must not keep a string per failure.
    display = Display(rich=False)
    failures = 3 * KEPT_ERRORS + 7
    for i in range(failures):
        display.event(OffloadEvent("failed", None, 10, f"copy {i} failed"))
    display.tally.add_error("round of t-0 failed: boom")
    tally = display.tally
    assert tally.error_count == failures + 1
    assert len(tally.errors) == KEPT_ERRORS
    assert tally.errors[-1] == "round of t-0 failed: boom"
    assert tally.errors[0] == f"copy {failures - KEPT_ERRORS + 1} failed"
    with caplog.at_level(logging.INFO, logger="rlmm.offload"):
        display.round_done(partitions=1)
        display.tally.add_error("again")
        display.round_done(partitions=1)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("round ")]
    assert f"0 deleted, {failures + 1} errors;" in lines[0]
    assert "0 deleted, 1 errors;" in lines[1] and f"{failures + 2} errors" in lines[1]


def test_the_rate_is_over_the_time_spent_copying_not_since_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 46: "0.4 MB/s so far" was the bytes copied over the time since start, idle
    rounds included. The rate is over the time some copy was in flight: two 2 MB
    copies of 2 s each, 1000 s apart, copied at 1 MB/s; two overlapping copies
    count their common second once."""
    from tests.rlmm.factories import segment, tp

    now = [0.0]
    display = Display(rich=False, clock=lambda: now[0])
    mb = 1_000_000

    def copy(at: float, took: float, offset: int) -> None:
        m = segment(tp(), offset, offset + 9, {0: offset})
        now[0] = at
        display.event(OffloadEvent("copy_started", m, 2 * mb))
        now[0] = at + took
        display.event(OffloadEvent("copy_ended", m, 2 * mb))
        display.event(OffloadEvent("copied", m, 2 * mb))

    with caplog.at_level(logging.INFO, logger="rlmm.offload"):
        copy(0.0, 2.0, 0)
        copy(1000.0, 2.0, 10)
    assert display.tally.copying_seconds() == pytest.approx(4.0)
    assert display.tally.rate() == pytest.approx(mb)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("copied ")]
    assert len(lines) == 2 and "2 segments, 1.0 MB/s while copying)" in lines[1], lines
    # overlapping: [2000, 2002] and [2001, 2003] are 3 s of copying, not 4
    a, b = segment(tp(), 20, 29, {0: 20}), segment(tp(), 30, 39, {0: 30})
    for at, kind, m in ((2000.0, "copy_started", a), (2001.0, "copy_started", b),
                        (2002.0, "copy_ended", a), (2003.0, "copy_ended", b)):  # fmt: skip
        now[0] = at
        display.event(OffloadEvent(kind, m, 2 * mb))
    assert display.tally.copying_seconds() == pytest.approx(7.0)
    now[0] = 5000.0  # idle time never counts
    assert display.tally.copying_seconds() == pytest.approx(7.0)
