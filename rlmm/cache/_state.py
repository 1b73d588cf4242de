"""Per-epoch state of one partition's cache, and the whole state a block decodes to.

Invariant: for every leader epoch, ``starts``/``ends``/``rows`` are the packed,
start-sorted index of the COPY_SEGMENT_FINISHED segments that serve reads in that epoch
(a point lookup is one bisect); every other segment that carries the epoch (STARTED,
DELETE_STARTED, superseded) is in ``unreferenced_rows``; ``size_bytes`` is the summed
size of the segments listed for the epoch. Both the cache and the block decoder build
these; the decoder hands the cache a :class:`CacheState` and never touches the cache
itself, so neither module imports the other's internals.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Literal, NamedTuple, Protocol

from rlmm.cache._columns import SegmentColumns
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition


class SegmentSource(Protocol):
    """What an epoch state asks its partition for, to build objects (the cache)."""

    topic_id_partition: TopicIdPartition
    columns: SegmentColumns

    def segment_at(self, row: int, memo: bool = True) -> RemoteLogSegmentMetadata: ...


class RemoteLogLeaderEpochState:
    """Segments (rows) of one leader epoch of one partition (Kafka's RemoteLogLeaderEpochState).

    ``starts``/``ends``/``rows`` are parallel packed columns: ``rows[i]`` is a FINISHED
    segment serving this epoch from ``starts[i]`` to ``ends[i]``.
    """

    __slots__ = (
        "_owner",
        "ends",
        "highest_offset",
        "rows",
        "size_bytes",
        "starts",
        "unreferenced_rows",
    )

    def __init__(self, owner: SegmentSource | None = None) -> None:
        self._owner = owner  # to build objects for the compatibility views
        # Owned arrays, or views of the block the state was decoded from (thaw()).
        self.starts: array[int] | memoryview = array("q")
        self.ends: array[int] | memoryview = array("q")  # last offset of this epoch inside rows[i]
        self.rows: array[int] | memoryview = array("i")
        self.unreferenced_rows: set[int] = set()
        self.highest_offset: int | None = None
        self.size_bytes = 0

    def thaw(self) -> None:
        self.owned()

    def owned(self) -> tuple[array[int], array[int], array[int]]:
        """``starts``, ``ends`` and ``rows``, thawed first if they are views (for a write)."""
        starts, ends, rows = self.starts, self.ends, self.rows
        if isinstance(starts, array) and isinstance(ends, array) and isinstance(rows, array):
            return starts, ends, rows
        owned = _owned("q", starts), _owned("q", ends), _owned("i", rows)
        self.starts, self.ends, self.rows = owned
        return owned

    def is_empty(self) -> bool:
        return not self.starts and not self.unreferenced_rows

    def floor(self, offset: int) -> int:
        """Row of the FINISHED segment with the greatest start <= ``offset``, or -1."""
        i = bisect_right(self.starts, offset)
        return self.rows[i - 1] if i else -1

    def lookup(self, offset: int) -> int:
        """Row whose range of this epoch holds ``offset`` (bisect + bound check), or -1."""
        i = bisect_right(self.starts, offset)
        return self.rows[i - 1] if i and offset <= self.ends[i - 1] else -1

    def all_rows(self) -> Iterator[int]:
        yield from self.rows
        yield from self.unreferenced_rows

    def add_started(self, row: int) -> None:
        self.unreferenced_rows.add(row)

    def add_finished(self, start: int, row: int, epoch_end: int) -> None:
        # A leader that re-uploads a range (after a leader change) supersedes every
        # mapping that starts at or after its start, as long as it reaches at least as
        # far as what this epoch already had: those segments stay listed, unreferenced.
        starts, ends, rows = self.owned()
        while (
            starts
            and starts[-1] >= start
            and self.highest_offset is not None
            and self.highest_offset <= epoch_end
        ):
            starts.pop()
            ends.pop()
            self.unreferenced_rows.add(rows.pop())
        i = bisect_left(starts, start)
        if i < len(starts) and starts[i] == start:
            self.unreferenced_rows.add(rows[i])
            rows[i] = row
            ends[i] = epoch_end
        else:
            starts.insert(i, start)
            ends.insert(i, epoch_end)
            rows.insert(i, row)
        self.unreferenced_rows.discard(row)
        if self.highest_offset is None or epoch_end > self.highest_offset:
            self.highest_offset = epoch_end

    def mark_deleting(self, start: int, row: int) -> None:
        starts, ends, rows = self.owned()
        i = bisect_left(starts, start)
        if i < len(starts) and starts[i] == start and rows[i] == row:
            del starts[i]
            del ends[i]
            del rows[i]
        self.unreferenced_rows.add(row)

    def remove(self, row: int) -> None:
        self.unreferenced_rows.discard(row)

    def renumber(self, remap: list[int]) -> None:
        self.rows = array("i", [remap[r] for r in self.rows])
        self.unreferenced_rows = {remap[r] for r in self.unreferenced_rows}

    # ---- object views (tools and the archive's lineage; not on the hot path) ------------

    @property
    def metas(self) -> list[RemoteLogSegmentMetadata]:
        """The FINISHED segments of ``rows``, as objects."""
        assert self._owner is not None
        return [self._owner.segment_at(r) for r in self.rows]

    @property
    def unreferenced(self) -> set[RemoteLogSegmentId]:
        owner = self._owner
        assert owner is not None
        return {
            owner.columns.segment_id(owner.topic_id_partition, r) for r in self.unreferenced_rows
        }


class CacheState(NamedTuple):
    """A partition's decoded state, for :meth:`RemoteLogMetadataCache.adopt`."""

    columns: SegmentColumns
    epochs: dict[int, RemoteLogLeaderEpochState]
    total_size_bytes: int
    block: bytes | None  # the bytes the columns are views of (None: they own their arrays)


def _owned(code: Literal["i", "q"], view: array[int] | memoryview) -> array[int]:
    owned = array(code)
    owned.frombytes(memoryview(view).cast("B"))
    return owned


__all__ = ["CacheState", "RemoteLogLeaderEpochState", "SegmentSource"]
