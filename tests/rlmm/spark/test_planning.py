"""Cutting slices by offsets (where index-aligned slices cannot get small enough): the
pieces tile the slice's offsets, keep its bytes, and carry only their own aborted
transactions; minPartitions and maxRecordsPerPartition are met."""

from __future__ import annotations

import itertools
from pathlib import Path

from rlmm.archive import Slice
from rlmm.spark import KafkaArchiveOptions, parse_options
from rlmm.spark.planning import split_by_offsets
from tests.rlmm.factories import segment, tp


def piece(start: int, until: int, txns: tuple[tuple[int, int, int], ...] = ()) -> Slice:
    return Slice(
        topic="foo",
        partition=0,
        segment=segment(tp(), start, until - 1, {0: start}),
        start_position=0,
        end_position=1024,
        from_offset=start,
        until_offset=until,
        remote_options={"type": "local", "root": "/r"},
        isolation_level="read_committed",
        aborted_transactions=txns,
    )


def options(tmp_path: Path, **more: str) -> KafkaArchiveOptions:
    return parse_options({"subscribe": "foo", "rlmm.data_dir": str(tmp_path), **more})


def test_max_records_per_partition_cuts_by_offsets(tmp_path: Path) -> None:
    aborted = ((7, 10, 14), (8, 30, 95))
    slices = [piece(0, 100, aborted), piece(100, 120)]
    out = split_by_offsets(slices, options(tmp_path, maxrecordsperpartition="30"))
    assert [(s.from_offset, s.until_offset) for s in out] == [
        (0, 25), (25, 50), (50, 75), (75, 100), (100, 120)
    ]  # fmt: skip
    assert all((s.start_position, s.end_position) == (0, 1024) for s in out)
    assert [s.aborted_transactions for s in out] == [
        ((7, 10, 14),), ((8, 30, 95),), ((8, 30, 95),), ((8, 30, 95),), ()
    ]  # fmt: skip


def test_min_partitions_cuts_the_biggest(tmp_path: Path) -> None:
    slices = [piece(0, 10), piece(10, 100)]
    out = split_by_offsets(slices, options(tmp_path, minpartitions="5"))
    assert len(out) == 5
    for a, b in itertools.pairwise(out):
        assert a.until_offset == b.from_offset
    assert (out[0].from_offset, out[-1].until_offset) == (0, 100)
    # Never more pieces than offsets.
    out = split_by_offsets([piece(0, 2)], options(tmp_path, minpartitions="9"))
    assert [(s.from_offset, s.until_offset) for s in out] == [(0, 1), (1, 2)]
