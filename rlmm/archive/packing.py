"""Planned slices grouped into read tasks: what one Spark input partition reads.

Job: pack a read's slices, in plan order, into groups that one task reads one after
the other, so that many small segments are not as many tasks. A task of a Python
data source costs Spark about 30 ms of wall time on ``local[2]`` whatever it reads
(measured with a source that returns 3 rows: 40 input partitions 1.30 s, 2 input
partitions 0.17 s), more than decoding 16 MiB of records costs us. The rule is the one
Spark's file sources use for files (``FilePartition``): every slice weighs its bytes
plus an open cost (4 MiB, ``spark.sql.files.openCostInBytes``'s default: starting a
fetch costs about as much as reading that much), and a group weighs at most
``max_group_bytes`` unless it is one slice. Two additions: there are at least
``min_groups`` groups (Spark's ``minPartitions``), and their number is then rounded up
to a multiple of it so that each of that many cores gets the same share (3 equal
tasks on 2 cores take as long as 4); and a group holds at most ``max_group_records``
records unless it is one slice.

Invariant: the groups hold every slice exactly once, in plan order, and none is empty.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlmm.archive.errors import ArchiveError
from rlmm.archive.request import Slice

OPEN_COST_BYTES = 4 * 1024 * 1024


def pack_slices(
    slices: Sequence[Slice],
    max_group_bytes: int,
    min_groups: int = 1,
    max_group_records: int | None = None,
    open_cost_bytes: int = OPEN_COST_BYTES,
) -> list[tuple[Slice, ...]]:
    """``slices`` as groups of consecutive slices, balanced by weight (see the module)."""
    if max_group_bytes <= 0 or min_groups <= 0 or open_cost_bytes < 0:
        raise ArchiveError(
            f"pack_slices needs max_group_bytes > 0, min_groups > 0 and open_cost_bytes >= 0,"
            f" got {max_group_bytes}, {min_groups}, {open_cost_bytes}"
        )
    if not slices:
        return []
    weights = [s.size_in_bytes + open_cost_bytes for s in slices]
    total = sum(weights)
    count = max(min_groups, -(-total // max_group_bytes))
    count = min(-(-count // min_groups) * min_groups, len(slices))
    share = total / count
    groups: list[tuple[Slice, ...]] = []
    current: list[Slice] = []
    weight = records = before = 0  # the open group's weight and records; weight before it
    for i, (piece, w) in enumerate(zip(slices, weights, strict=True)):
        n = piece.until_offset - piece.from_offset
        if current and (
            len(slices) - i < min_groups - len(groups)  # just enough left for min_groups
            or before + weight + w / 2 > (len(groups) + 1) * share  # over half past its share
            or weight + w > max_group_bytes
            or (max_group_records is not None and records + n > max_group_records)
        ):
            groups.append(tuple(current))
            before += weight
            current, weight, records = [], 0, 0
        current.append(piece)
        weight += w
        records += n
    groups.append(tuple(current))
    return groups


__all__ = ["OPEN_COST_BYTES", "pack_slices"]
