"""A round's view of a local log: its answers by bisection equal the plain definitions,
and the sidecar's view holds no object per local segment.

A local log that keeps thousands of segments (a topic whose local retention is long)
used to cost a LocalSegment and a path string per segment on every round of its
partition: freed at once, yet resident in proportion to the log.
"""

from __future__ import annotations

import os
import tracemalloc
from itertools import pairwise
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from remote.segments import PartitionDir, encode_partition_metadata, offset_file_name
from rlmm.offload import LogDirSource
from rlmm.offload.log_source import LocalSegment, LogSource, LogView
from tests.rlmm.offload.conftest import KEEP_ALL
from tests.rlmm.offload.test_scale import TOPIC_ID, settle


def _plain_view(bases: list[int], sizes: list[int], lso: int, active_size: int) -> LogView:
    rolled = [
        LocalSegment(base, after, sizes[i], f"{base}.log")
        for i, (base, after) in enumerate(pairwise(bases))
    ]
    return LogView(rolled, (), 0, bases[-1] + 5, lso, active_size)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=30),
    st.lists(st.integers(0, 10_000), min_size=30, max_size=30),
    st.integers(0, 1600),
    st.integers(-5, 1600),
    st.integers(0, 999),
)
def test_view_answers_equal_their_definitions(
    steps: list[int], sizes: list[int], lso: int, offset: int, active_size: int
) -> None:
    bases = [100]
    for step in steps:
        bases.append(bases[-1] + step)
    view = _plain_view(bases, sizes, lso, active_size)
    rolled = list(view.rolled)
    assert list(view.rolled_from(offset)) == [
        s for s in rolled if s.next_base_offset > offset and s.next_base_offset <= lso
    ]
    assert view.local_bytes_from(offset) == sum(
        s.size_in_bytes for s in rolled if s.next_base_offset > offset
    ) + (active_size if view.log_end_offset + 1 > offset else 0)
    assert view.local_start_offset == (rolled[0].base_offset if rolled else view.log_end_offset)


def _many_segments(logs: Path, count: int) -> PartitionDir:
    """``orders-0`` listing ``count`` rolled segments (sizes vary) and an active one: only
    their names and sizes, what a view reads of rolled segments."""
    path = logs / "orders-0"
    path.mkdir(parents=True)
    (path / "partition.metadata").write_bytes(encode_partition_metadata(TOPIC_ID))
    for i in range(count + 1):
        base = i * 100
        (path / offset_file_name(base, ".log")).write_bytes(b"x" * (i % 7))
        (path / offset_file_name(base, ".index")).touch()
        (path / offset_file_name(base, ".timeindex")).touch()
    settle(path)
    return PartitionDir(path)


def test_a_view_of_a_long_local_log_builds_only_what_is_read(tmp_path: Path) -> None:
    count = 3_000
    src = LogDirSource(_many_segments(tmp_path / "logs", count), KEEP_ALL)
    view = src.view()  # the first lists the dir and stats every rolled segment once
    plain = [
        LocalSegment(
            i * 100,
            (i + 1) * 100,
            i % 7,
            os.path.join(str(src.pdir.path), offset_file_name(i * 100, ".log")),
        )
        for i in range(count)
    ]
    assert len(view.rolled) == count and list(view.rolled) == plain
    assert view.rolled == plain and view.rolled[-1] == plain[-1] and view.rolled[5:8] == plain[5:8]
    assert src.view() == LogSource.view(src)
    tracemalloc.start()
    try:
        view = src.view()
        copy = list(view.rolled_from(count * 100 - 150))
        local_bytes = view.local_bytes_from(count * 100 - 150)
        _, view_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        listing = list(view.rolled)
        _, listing_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert copy == plain[-2:] and view.active_size == count % 7
    assert local_bytes == plain[-2].size_in_bytes + plain[-1].size_in_bytes + view.active_size
    assert len(listing) == count
    # A list of the segments costs ~200 bytes a segment; the round's reads, a fraction.
    assert view_peak < listing_peak / 10, (view_peak, listing_peak)
