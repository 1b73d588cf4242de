"""bench/_replicated.py's first-copy figure: from a leadership change to the new
leader's first finished copy, and from the change or the segment's roll, whichever came
later (a copy cannot start before its segment rolled)."""

from __future__ import annotations

from typing import Any

from bench._replicated import LeaderChange, first_copy_figures


def added(topic: str, partition: int, broker: int, max_ts: int) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "broker_id": broker,
            "max_timestamp_ms": max_ts, "segment_size_in_bytes": 100}  # fmt: skip


def test_a_first_copy_counts_from_the_change_or_from_the_roll_that_came_after_it() -> None:
    changes = [
        # the segment had rolled before the change: 1.5 s from the change
        LeaderChange("t", 0, old=1, new=2, epoch=3, at_ms=10_000, cause="preferred election"),
        # nothing rolled yet: 3.3 s from the change, 1.1 s from the roll at 12_200
        LeaderChange("t", 1, old=1, new=3, epoch=4, at_ms=10_000, cause="broker 1: SIGKILL"),
    ]  # fmt: skip
    meta = {"a": added("t", 0, 2, 9_000), "b": added("t", 1, 3, 12_200)}
    finished = {"a": 11_500, "b": 13_300}
    figures = first_copy_figures(changes, meta, finished, {}, 1.0, 20_000, (0, 1))
    rows = {r["tp"]: r for r in figures["slowest"]}
    assert (rows["t-0"]["s"], rows["t-0"]["from_roll_s"]) == (1.5, 1.5)
    assert (rows["t-1"]["s"], rows["t-1"]["from_roll_s"]) == (3.3, 1.1)
    assert figures["outside_the_storm"]["over_target"] == 1
    rolled = figures["outside_the_storm_from_the_change_or_the_roll"]
    assert (rolled["max"], rolled["over_target"]) == (1.5, 0)
