"""A query's filter as RowBounds: how comparisons become bounds (timestamps rounded from
Spark's microseconds), and that planning and reading with them return exactly the
rows the filter keeps while fetching and decoding less."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from rlmm.archive import (
    DataLossError,
    ReadRequest,
    RowBounds,
    Slice,
    comparison_bounds,
    open_metadata_view,
    plan_slices,
)
from rlmm.archive import columns as columns_module
from rlmm.archive.reader import read_slice
from rlmm.config import RlmmConfig
from tests.rlmm.archive.timeline_data import (
    BASE_TS,
    OUT_OF_ORDER,
    PARTITIONS,
    SEGMENT_RECORDS,
    TOPIC,
    write_timeline,
)

Row = tuple[int, int, int, bytes]  # partition, offset, timestamp ms, key


def at_ms(ms: int, micros: int = 0) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).replace(microsecond=(ms % 1000) * 1000 + micros)


# ---- comparisons -> bounds --------------------------------------------------------------


def test_timestamps_round_so_a_millisecond_passes_exactly_when_its_microseconds_do() -> None:
    t = at_ms(5_000, micros=500)  # 5000.5 ms
    assert comparison_bounds("timestamp", ">=", t).min_timestamp_ms == 5_001
    assert comparison_bounds("timestamp", ">", t).min_timestamp_ms == 5_001
    assert comparison_bounds("timestamp", "<=", t).max_timestamp_ms == 5_000
    assert comparison_bounds("timestamp", "<", t).max_timestamp_ms == 5_000
    assert comparison_bounds("timestamp", "=", t).empty  # no millisecond equals it
    whole = at_ms(5_000)
    assert comparison_bounds("timestamp", ">=", whole).min_timestamp_ms == 5_000
    assert comparison_bounds("timestamp", ">", whole).min_timestamp_ms == 5_001
    assert comparison_bounds("timestamp", "<", whole).max_timestamp_ms == 4_999
    assert comparison_bounds("timestamp", "<=", whole).max_timestamp_ms == 5_000
    eq = comparison_bounds("timestamp", "=", whole)
    assert (eq.min_timestamp_ms, eq.max_timestamp_ms) == (5_000, 5_000)
    # Any zone: the instant counts. Before 1970 too.
    plus2 = datetime(1970, 1, 1, 2, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    assert comparison_bounds("timestamp", ">=", plus2).min_timestamp_ms == 5_000
    assert comparison_bounds("timestamp", "<", at_ms(-1_000)).max_timestamp_ms == -1_001


def test_each_column_and_in() -> None:
    assert comparison_bounds("topic", "=", "a") == RowBounds(topics=frozenset({"a"}))
    assert comparison_bounds("topic", "in", ["a", "b"]) == RowBounds(topics=frozenset({"a", "b"}))
    assert comparison_bounds("partition", "in", (0, 2)) == RowBounds(partitions=frozenset({0, 2}))
    assert comparison_bounds("offset", ">", 9) == RowBounds(min_offset=10)
    assert comparison_bounds("offset", "<", 9) == RowBounds(max_offset=8)
    assert comparison_bounds("offset", "in", [7, 3, 11]) == RowBounds(min_offset=3, max_offset=11)
    ts = comparison_bounds("timestamp", "in", [at_ms(9), at_ms(2, micros=1), at_ms(4)])
    assert (ts.min_timestamp_ms, ts.max_timestamp_ms) == (4, 9)  # 2.001 ms matches no row
    assert comparison_bounds("partition", "in", []).empty
    both = RowBounds().with_comparison("offset", ">=", 10).with_comparison("offset", "<", 5)
    assert both.empty and not both.keeps_partition("t", 0)
    p = RowBounds().with_comparison("partition", "=", 1).with_comparison("partition", "=", 2)
    assert p.empty


@pytest.mark.parametrize(
    ("column", "op", "value"),
    [
        ("value", "=", b"x"),  # another column
        ("key", "=", b"x"),
        ("partition", ">", 1),  # a partition range: no bound
        ("partition", "=", "1"),  # a value of another type
        ("offset", "=", 1.5),
        ("offset", "=", True),
        ("offset", "=", None),
        ("timestamp", ">=", datetime(2024, 1, 1)),  # naive: its zone is not known
        ("timestamp", ">=", 1_700_000_000),
        ("topic", ">", "a"),
        ("offset", "in", [1, "2"]),
        ("offset", "like", 1),
    ],
)
def test_what_is_not_understood_adds_no_bound(column: str, op: str, value: Any) -> None:
    assert comparison_bounds(column, op, value) == RowBounds()


# ---- planning and reading -------------------------------------------------------------


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[RlmmConfig, list[Row]]:
    config, archived = write_timeline(tmp_path_factory.mktemp("timeline"))
    rows = [(p, o, ts, key) for p in range(PARTITIONS) for o, ts, key in archived[p]]
    return config, rows


def read(
    config: RlmmConfig, where: RowBounds | None, **request: Any
) -> tuple[list[Slice], list[Row]]:
    with open_metadata_view(config) as view:
        slices = plan_slices(
            view, ReadRequest(topics=(TOPIC,), where=where, **request), config.remote_options()
        )
    out: list[Row] = []
    for piece in slices:
        for batch in read_slice(pickle.loads(pickle.dumps(piece))):
            millis = [t.value // 1000 for t in batch.column("timestamp")]
            out += zip(
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                millis,
                batch.column("key").to_pylist(),
                strict=True,
            )
    return slices, sorted(out)


def bounds(*comparisons: tuple[str, str, Any]) -> RowBounds:
    out = RowBounds()
    for column, op, value in comparisons:
        out = out.with_comparison(column, op, value)
    return out


def kept(rows: list[Row], keep: Callable[[Row], bool]) -> list[Row]:
    return sorted(r for r in rows if keep(r))


def planned_bytes(slices: list[Slice]) -> int:
    return sum(s.size_in_bytes for s in slices)


def test_no_filter_reads_everything(timeline: Any) -> None:
    config, rows = timeline
    _, got = read(config, None)
    assert got == rows
    assert read(config, RowBounds())[1] == rows


def test_a_timestamp_window_returns_exactly_its_rows_and_skips_older_segments(
    timeline: Any,
) -> None:
    config, rows = timeline
    full, _ = read(config, None)
    lo, hi = BASE_TS + 1_200_000, BASE_TS + 1_260_000  # offsets 1200..1260 of each partition
    where = bounds(("timestamp", ">=", at_ms(lo)), ("timestamp", "<", at_ms(hi)))
    slices, got = read(config, where)
    assert got == kept(rows, lambda r: lo <= r[2] < hi)
    # The straggler (offset 1510, an old timestamp) is after the window: not in it. The
    # segments before the window are not planned, except 700's (its max timestamp is
    # an hour ahead), and the first one left starts at its time-index entry.
    firsts = {s.from_offset // SEGMENT_RECORDS for s in slices}
    assert min(firsts) == 7 and 8 not in firsts and 12 in firsts
    starts = [s.from_offset for s in slices if s.from_offset // SEGMENT_RECORDS == 7]
    assert all(s > 700 - 20 for s in starts)  # cut at the time index, not the segment start
    assert planned_bytes(slices) < planned_bytes(full) * 0.55
    # A window holding the straggler's old timestamp finds it in its late segment.
    old = OUT_OF_ORDER[1510]
    where = bounds(("timestamp", ">=", at_ms(old)), ("timestamp", "<=", at_ms(old)))
    _, got = read(config, where)
    assert got == kept(rows, lambda r: r[2] == old)
    assert {r[1] for r in got} == {300, 1510}


def test_batches_before_the_window_are_not_decoded(timeline: Any, monkeypatch: Any) -> None:
    config, rows = timeline
    decoded: list[int] = []
    add = columns_module.ColumnBuilder.add

    def counting(self: Any, header: Any, data: Any) -> int:
        decoded.append(header.base_offset)
        return add(self, header, data)

    monkeypatch.setattr(columns_module.ColumnBuilder, "add", counting)
    lo = BASE_TS + 1_800_000
    _, got = read(config, bounds(("timestamp", ">", at_ms(lo))))
    assert got == kept(rows, lambda r: r[2] > lo)
    # Only batches from the window's segment on (and 700's batch, an hour ahead).
    assert set(decoded) - {700} and min(set(decoded) - {700}) >= 1790
    assert 700 in decoded


@pytest.mark.parametrize(
    ("comparisons", "keep"),
    [
        ((("partition", "=", 1),), lambda r: r[0] == 1),
        ((("partition", "in", [0]), ("offset", ">=", 250)), lambda r: r[0] == 0 and r[1] >= 250),
        ((("offset", ">", 99), ("offset", "<=", 305)), lambda r: 99 < r[1] <= 305),
        ((("offset", "in", [5, 1234, 777]),), lambda r: r[1] in (5, 1234, 777)),
        ((("topic", "=", TOPIC), ("offset", "=", 42)), lambda r: r[1] == 42),
        ((("topic", "in", ["other"]),), lambda r: False),
        ((("offset", ">", 10), ("offset", "<", 5)), lambda r: False),
    ],
)
def test_partition_offset_and_topic_filters(
    timeline: Any, comparisons: Any, keep: Callable[[Row], bool]
) -> None:
    config, rows = timeline
    full, _ = read(config, None)
    slices, got = read(config, bounds(*comparisons))
    # The reader may return more rows than the filter keeps (Spark applies it again);
    # the filter applied to them gives exactly its rows, and nothing it keeps is lost.
    assert kept(got, keep) == kept(rows, keep)
    assert planned_bytes(slices) < planned_bytes(full)


def test_an_upper_timestamp_bound_skips_only_segments_wholly_after_it(timeline: Any) -> None:
    """Timestamps need not grow with offsets (the straggler at 1510 is in this window),
    so a window's end drops a segment only by its smallest timestamp, which rlmm's
    offloader recorded in each copy's manifest; the reader returns only the window's
    rows. (tests/rlmm/archive/test_smallest_timestamps.py: unknown ones, other layouts.)"""
    config, rows = timeline
    hi = BASE_TS + 350_000
    slices, got = read(config, bounds(("timestamp", "<", at_ms(hi))))
    assert got == kept(rows, lambda r: r[2] < hi)
    assert (0, 1510) in {(r[0], r[1]) for r in got}
    planned = {(s.partition, s.segment.start_offset) for s in slices}
    assert planned == {(p, o) for p in range(PARTITIONS) for o in (0, 100, 200, 300, 1500)}


def test_offset_filters_narrow_slices_to_their_range(timeline: Any) -> None:
    config, rows = timeline
    slices, got = read(config, bounds(("partition", "=", 0), ("offset", "in", [150, 160])))
    assert got == kept(rows, lambda r: r[0] == 0 and 150 <= r[1] <= 160)
    assert [(s.partition, s.from_offset, s.until_offset) for s in slices] == [(0, 150, 161)]


def test_a_filter_does_not_hide_a_failure_of_the_options(timeline: Any) -> None:
    config, _ = timeline
    beyond = {(TOPIC, 0): 10**6, (TOPIC, 1): 10**6}
    for where in (bounds(("partition", "=", 1)), bounds(("offset", "<", 10))):
        with pytest.raises(DataLossError, match="not in the archive"):
            read(config, where, ending_offsets=beyond)


def test_where_must_be_row_bounds(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="where must be a RowBounds"):
        ReadRequest(topics=("t",), where="partition = 1")  # type: ignore[arg-type]
