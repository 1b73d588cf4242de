"""A segment's facts as one round of the offloader reads them: a few numbers from the
cache's packed record, not a RemoteLogSegmentMetadata.

Invariant: a summary names its row in the cache it came from; rows are renumbered
when the cache compacts (after deletions), so a summary, and ``metadata()``, are good
only until the caller's next ``await`` (the walks that hand them out say the same).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState

if TYPE_CHECKING:
    from rlmm.cache.partition import RemoteLogMetadataCache

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class SegmentSummary:
    """State, offsets, max timestamp, size and whether a lookup still finds the segment
    (``referenced``: some offset of it, in its leader epoch, is served by it; only a
    FINISHED segment can be; worked out when first asked, as it costs a bisect per
    leader epoch and walks such as the lineage check never ask)."""

    __slots__ = (
        "_cache",
        "_referenced",
        "end_offset",
        "max_timestamp_ms",
        "row",
        "segment_size_in_bytes",
        "start_offset",
        "state",
    )

    def __init__(self, cache: RemoteLogMetadataCache, row: int) -> None:
        self._cache = cache
        self.row = row
        start, end, max_ts, size, state = cache.columns.facts(row)
        self.start_offset = start
        self.end_offset = end
        self.max_timestamp_ms = max_ts
        self.segment_size_in_bytes = size
        self.state = state
        self._referenced: bool | None = None

    @property
    def referenced(self) -> bool:
        found = self._referenced
        if found is None:
            found = self.state is _FINISHED and self._cache.is_referenced(
                self.row, self.start_offset
            )
            self._referenced = found
        return found

    @property
    def segment_leader_epochs(self) -> dict[int, int]:
        return dict(self._cache.columns.epoch_items(self.row))

    def metadata(self) -> RemoteLogSegmentMetadata:
        """The segment's full metadata (built now: before the next await)."""
        return self._cache.segment_at(self.row, memo=False)

    def __repr__(self) -> str:
        return (
            f"SegmentSummary(row={self.row}, {self.state.name}, offsets {self.start_offset}-"
            f"{self.end_offset}, referenced={self.referenced})"
        )


__all__ = ["SegmentSummary"]
