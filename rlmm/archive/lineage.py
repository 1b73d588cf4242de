"""The readable history of one partition: its COPY_SEGMENT_FINISHED segments along the
leader-epoch lineage, each with the offset range it serves.

Job: turn one RemoteLogMetadataCache into an ordered list of :class:`LineageRange`
(segment, first offset, last offset). The lineage is the chain of leader epochs the
newest leader inherited: an epoch is on it only if it starts before the next epoch
on it (an epoch whose leader's records were all truncated away is not), and each
epoch ends where the next one starts, so records an old leader wrote past that
point (then truncated by the new leader) are never served. Within an epoch the
cache already keeps only the segments that serve reads (a re-upload by a new leader
supersedes the old copy).

Invariant: the ranges are sorted, never overlap (no record is served twice) and
each lies inside its segment; a hole between two consecutive ranges is data that is
not in the archive (a gap), never hidden by the list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

from rlmm.cache import RemoteLogMetadataCache
from rlmm.model import RemoteLogSegmentMetadata


@dataclass(frozen=True, slots=True)
class LineageRange:
    """Offsets ``[first_offset, last_offset]`` (inclusive) of the partition that
    ``segment`` serves on the lineage."""

    segment: RemoteLogSegmentMetadata
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets ``[first_offset, last_offset]`` missing between two lineage ranges."""

    first_offset: int
    last_offset: int


def _epoch_ranges(metadata: RemoteLogSegmentMetadata) -> Iterator[tuple[int, int, int]]:
    items = list(metadata.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(items):
        end = items[i + 1][1] - 1 if i + 1 < len(items) else metadata.end_offset
        yield epoch, start, end


def epoch_chain(cache: RemoteLogMetadataCache) -> list[tuple[int, int, int]]:
    """(epoch, first offset, last offset) of each epoch on the lineage, ascending."""
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for state in cache.epochs.values():
        for metadata in state.metas:
            for epoch, start, end in _epoch_ranges(metadata):
                if start > end:
                    continue
                starts[epoch] = min(starts.get(epoch, start), start)
                ends[epoch] = max(ends.get(epoch, end), end)
    chain: list[tuple[int, int, int]] = []
    bound: int | None = None  # first offset of the next (higher) epoch on the lineage
    for epoch in sorted(starts, reverse=True):
        start = starts[epoch]
        if bound is not None and start >= bound:
            continue  # truncated away by a later leader: not on the lineage
        end = ends[epoch] if bound is None else min(ends[epoch], bound - 1)
        chain.append((epoch, start, end))
        bound = start
    chain.reverse()
    return chain


def lineage_ranges(cache: RemoteLogMetadataCache) -> list[LineageRange]:
    """The segments serving each offset of the lineage, sorted, without overlaps."""
    pieces: list[tuple[int, int, RemoteLogSegmentMetadata]] = []
    for epoch, first, last in epoch_chain(cache):
        state = cache.epochs[epoch]
        for start, end, metadata in zip(state.starts, state.ends, state.metas, strict=True):
            a, b = max(start, first), min(end, last)
            if a <= b:
                pieces.append((a, b, metadata))
    pieces.sort(key=lambda p: (p[0], -p[1]))
    out: list[LineageRange] = []
    next_offset: int | None = None
    for a, b, metadata in pieces:
        if next_offset is not None:
            if b < next_offset:
                continue  # already served by an earlier segment of the lineage
            a = max(a, next_offset)
        if out and out[-1].segment is metadata and out[-1].last_offset + 1 == a:
            out[-1] = LineageRange(metadata, out[-1].first_offset, b)
        else:
            out.append(LineageRange(metadata, a, b))
        next_offset = b + 1
    return out


def gaps(ranges: list[LineageRange]) -> list[Gap]:
    """Holes between consecutive ranges (the archive's start is not a gap)."""
    return [
        Gap(prev.last_offset + 1, cur.first_offset - 1)
        for prev, cur in pairwise(ranges)
        if cur.first_offset > prev.last_offset + 1
    ]


__all__ = ["Gap", "LineageRange", "epoch_chain", "gaps", "lineage_ranges"]
