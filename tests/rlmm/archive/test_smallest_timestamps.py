"""Time windows skip the segments wholly after them, by each segment's smallest timestamp:
recorded by rlmm's offloader in its manifest, or learned by readers into rlmm's side
index for a layout rlmm did not write (Kafka's LocalTieredStorage here; Aiven's in
tests/integration/test_aiven_plugin_data.py). Rows never change, only what is read;
an unknown smallest timestamp reads as before; the timestamp options resolve to the
same offsets."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest

from remote import IndexType
from remote.layouts.rlmm_layout import RlmmLayout
from remote.naming import partition_prefix
from remote.registry import load_remote_layout
from remote.side_index import Entry, entry_name
from rlmm.archive import ReadRequest, RowBounds, Slice, open_metadata_view, plan_slices
from rlmm.archive import smallest_timestamps as smallest_module
from rlmm.archive.reader import read_slice
from rlmm.config import RlmmConfig
from rlmm.model import RemoteLogSegmentMetadata
from tests.rlmm.archive.timeline_data import (
    BASE_TS,
    PARTITIONS,
    SEGMENT_RECORDS,
    TOPIC,
    as_local_tiered_storage,
    timestamp_of,
    write_timeline,
)

Row = tuple[int, int, int, bytes]
# The window [1200 s, 1260 s): segment 12 holds it, 7 holds a record an hour ahead (its
# max timestamp reaches past the window's start) and 15 the straggler stamped at 300 s
# (its smallest timestamp is before the window's end); 13, 14 and 16-19 are wholly after.
WINDOW = RowBounds(min_timestamp_ms=BASE_TS + 1_200_000, max_timestamp_ms=BASE_TS + 1_259_999)
WINDOW_SEGMENTS = {700, 1200, 1500}
UNKNOWN = {700} | set(range(1200, 1900, SEGMENT_RECORDS))  # every segment not before it


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[RlmmConfig, list[Row], Path]:
    tmp = tmp_path_factory.mktemp("smallest")
    config, archived = write_timeline(tmp)
    rows = [(p, o, ts, key) for p in range(PARTITIONS) for o, ts, key in archived[p]]
    return config, sorted(rows), tmp


def read(
    config: RlmmConfig,
    where: RowBounds | None = None,
    *,
    remote: dict[str, Any] | None = None,
    side_index: str | None = None,
    **request: Any,
) -> tuple[list[Slice], list[Row]]:
    with open_metadata_view(config) as view:
        slices = plan_slices(
            view,
            ReadRequest(topics=(TOPIC,), where=where, **request),
            remote or config.remote_options(),
            side_index=side_index,
        )
    out: list[Row] = []
    for piece in slices:
        for batch in read_slice(pickle.loads(pickle.dumps(piece))):
            out += zip(
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                [t.value // 1000 for t in batch.column("timestamp")],
                batch.column("key").to_pylist(),
                strict=True,
            )
    return slices, sorted(out)


def in_window(rows: list[Row], where: RowBounds) -> list[Row]:
    lo, hi = where.min_timestamp_ms or 0, where.max_timestamp_ms or 2**63
    return [r for r in rows if lo <= r[2] <= hi]


def planned(slices: list[Slice]) -> set[int]:
    return {s.segment.start_offset for s in slices}


def window_plans(
    config: RlmmConfig, rows: list[Row], where: RowBounds = WINDOW, **kw: Any
) -> set[int]:
    """The segments a windowed read planned, once its rows are checked exact."""
    slices, got = read(config, where, **kw)
    assert got == in_window(rows, where)
    return planned(slices)


def every_segment() -> set[int]:
    return set(range(0, 1900, SEGMENT_RECORDS))  # the 20th segment is the active one


def test_the_offloader_records_each_segments_true_minimum(timeline: Any) -> None:
    config, _, _ = timeline
    layout = load_remote_layout(config.remote_options())
    with open_metadata_view(config) as view:
        for tp in view.topic_partitions():
            for m in view.lineage(tp):
                expected = min(timestamp_of(n) for n in range(m.start_offset, m.end_offset + 1))
                assert layout.smallest_timestamp(m) == expected
    # The straggler's segment: its smallest timestamp is far below its first record's.
    assert timestamp_of(1510) < timestamp_of(1500)


def test_a_window_plans_only_the_segments_that_can_hold_its_rows(timeline: Any) -> None:
    config, rows, _ = timeline
    assert window_plans(config, rows) == WINDOW_SEGMENTS


def test_unknown_smallest_timestamps_are_read_as_before(
    timeline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, rows, _ = timeline
    monkeypatch.setattr(RlmmLayout, "smallest_timestamp", lambda self, m: None)
    assert window_plans(config, rows) == UNKNOWN


@pytest.mark.parametrize("at", [0, 100, 699, 1510, 5000])
def test_timestamp_options_resolve_to_the_same_offsets_with_less_fetched(
    timeline: Any, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    config, _, _ = timeline
    ts = BASE_TS + at * 1000
    fetched: list[int] = []
    fetch_index = RlmmLayout.fetch_index

    def counting(self: Any, m: RemoteLogSegmentMetadata, kind: IndexType) -> bytes:
        if kind is IndexType.TIMESTAMP:
            fetched.append(m.start_offset)
        return fetch_index(self, m, kind)

    monkeypatch.setattr(RlmmLayout, "fetch_index", counting)
    options: dict[str, Any] = {"starting_timestamp_strategy": "latest"}
    known_start = read(config, starting_timestamp_ms=ts, **options)
    known_end = read(config, ending_timestamp_ms=ts)
    with_smallest = len(fetched)
    monkeypatch.setattr(RlmmLayout, "smallest_timestamp", lambda self, m: None)
    fetched.clear()
    assert read(config, starting_timestamp_ms=ts, **options) == known_start
    assert read(config, ending_timestamp_ms=ts) == known_end
    assert with_smallest <= len(fetched)
    if at in (0, 100):  # the answer is a segment's first record: no time index needed
        assert with_smallest < len(fetched)


@pytest.fixture
def foreign(timeline: Any, tmp_path: Path) -> tuple[RlmmConfig, list[Row], dict[str, Any], Path]:
    """The timeline as Kafka's LocalTieredStorage holds it, and a fresh side index."""
    config, rows, _ = timeline
    return config, rows, as_local_tiered_storage(config, tmp_path / "lts"), tmp_path / "side"


def test_a_foreign_layout_learns_on_first_read_then_skips(
    foreign: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, rows, remote, side = foreign
    # No side index: every segment from the window's start on is read, as before.
    assert window_plans(config, rows, remote=remote) == UNKNOWN
    # The first read with the side index reads the same, and its readers learn.
    slices, _ = read(config, WINDOW, remote=remote, side_index=str(side))
    assert planned(slices) == UNKNOWN
    assert all(s.side_index == str(side) for s in slices)
    # Nothing written into the foreign layout's tree; entries under rlmm's own.
    assert not [p for p in (tmp_path / "lts").rglob("*") if "." not in p.name and p.is_file()]
    # Segments 13..19: read whole. (7 and 12 hold the window's start: their batches
    # before it were skipped undecoded, so their smallest timestamp stays unknown.)
    assert len(list(side.rglob("*.*.*.*.*"))) == PARTITIONS * 7
    assert window_plans(config, rows, remote=remote, side_index=str(side)) == WINDOW_SEGMENTS
    # A full read learns the rest: segments before the window too.
    _, got = read(config, remote=remote, side_index=str(side))
    assert got == rows
    early = RowBounds(max_timestamp_ms=BASE_TS + 349_999)
    assert window_plans(config, rows, early, remote=remote, side_index=str(side)) == {
        0, 100, 200, 300, 1500
    }  # fmt: skip
    assert "corrupt" not in caplog.text


def test_corrupt_or_conflicting_entries_are_unknown_never_a_wrong_skip(
    foreign: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config, rows, remote, side = foreign
    read(config, remote=remote, side_index=str(side))  # learns every segment
    with open_metadata_view(config) as view:
        tp = view.find(TOPIC, 0)
        assert tp is not None
        by_start = {m.start_offset: m for m in view.lineage(tp)}
    directory = side / partition_prefix(tp)
    # Segment 1300 (wholly after the window): a second, different value for its range.
    m = by_start[1300]
    (
        directory / entry_name(m.remote_log_segment_id.id, Entry(0, m.segment_size_in_bytes, 0))
    ).touch()
    # Segment 1400: its entry's name damaged (the CRC no longer matches).
    (damaged,) = directory.glob(f"{by_start[1400].remote_log_segment_id.id.hex}.*")
    damaged.rename(damaged.with_name(damaged.name.replace(".0.", ".1.", 1)))
    (directory / "not-an-entry").touch()
    caplog.set_level(logging.WARNING)
    slices, got = read(config, WINDOW, remote=remote, side_index=str(side))
    assert got == in_window(rows, WINDOW)
    damaged_too = WINDOW_SEGMENTS | {1300, 1400}
    assert {s.segment.start_offset for s in slices if s.partition == 0} == damaged_too
    assert {s.segment.start_offset for s in slices if s.partition == 1} == WINDOW_SEGMENTS
    assert "two smallest timestamps" in caplog.text and "corrupt" in caplog.text


def test_an_unusable_side_index_never_fails_a_read(
    foreign: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, rows, remote, _ = foreign
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    smallest_module._failed.clear()
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        assert window_plans(config, rows, remote=remote, side_index=str(blocker / "side")) == (
            UNKNOWN
        )
    assert caplog.text.count("cannot be used") == 1
