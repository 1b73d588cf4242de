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
