"""Slices grouped into read tasks: every slice once, in order; the byte, record and
group-count rules of ``pack_slices``."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmm.archive import OPEN_COST_BYTES, ArchiveError, Slice, pack_slices
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

MiB = 1024 * 1024
TP = TopicIdPartition(uuid.UUID(int=7), "orders", 0)


def slices(sizes: list[int], records: int = 100) -> list[Slice]:
    out = []
    for i, size in enumerate(sizes):
        meta = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(TP), i * records, (i + 1) * records - 1, 0, 0, 0,
            size, {0: i * records},
        )  # fmt: skip
        out.append(Slice("orders", 0, meta, 0, size, i * records, (i + 1) * records, {}))
    return out


def test_small_segments_share_tasks_and_big_ones_do_not() -> None:
    # What the Spark bench reads: 22 segments of 16 MiB; with the 4 MiB open cost they
    # weigh 440 MiB: 4 groups of 128 MiB at most, and with minPartitions 2 still 4.
    pieces = slices([16 * MiB] * 22)
    groups = pack_slices(pieces, 128 * MiB)
    assert [len(g) for g in groups] == [6, 5, 6, 5]
    assert pack_slices(pieces, 128 * MiB, min_groups=2) == groups
    # Three groups would leave one of two cores alone with the last: rounded up to 4.
    assert len(pack_slices(slices([16 * MiB] * 14), 128 * MiB, min_groups=2)) == 4
    # A slice bigger than a group is a group of its own.
    big = slices([200 * MiB, 1 * MiB, 1 * MiB, 300 * MiB])
    assert [len(g) for g in pack_slices(big, 128 * MiB)] == [1, 2, 1]
    # An open cost as big as a group: one slice per group (Spark's old one-per-slice).
    assert [len(g) for g in pack_slices(pieces, 128 * MiB, open_cost_bytes=128 * MiB)] == [1] * 22


def test_min_groups_and_max_records() -> None:
    pieces = slices([1000] * 10, records=50)
    assert len(pack_slices(pieces, 128 * MiB)) == 1
    assert [len(g) for g in pack_slices(pieces, 128 * MiB, min_groups=3)] == [3, 4, 3]
    assert len(pack_slices(pieces, 128 * MiB, min_groups=40)) == 10  # no more than slices
    assert [len(g) for g in pack_slices(pieces, 128 * MiB, max_group_records=120)] == [2] * 5
    assert pack_slices([], 128 * MiB) == []
    with pytest.raises(ArchiveError, match="max_group_bytes > 0"):
        pack_slices(pieces, 0)


@given(
    sizes=st.lists(st.integers(0, 300 * MiB), min_size=1, max_size=60),
    cap=st.integers(1, 256 * MiB),
    min_groups=st.integers(1, 8),
    max_records=st.none() | st.integers(1, 500),
)
def test_every_slice_once_in_order_within_the_caps(
    sizes: list[int], cap: int, min_groups: int, max_records: int | None
) -> None:
    pieces = slices(sizes)
    groups = pack_slices(pieces, cap, min_groups=min_groups, max_group_records=max_records)
    assert [s for g in groups for s in g] == pieces and all(groups)
    for g in groups:
        if len(g) > 1:
            assert sum(s.size_in_bytes + OPEN_COST_BYTES for s in g) <= cap
            assert max_records is None or sum(s.until_offset - s.from_offset for s in g) <= (
                max_records
            )
    assert len(groups) >= min(min_groups, len(pieces))
