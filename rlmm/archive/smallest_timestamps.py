"""What the archive knows of each segment's smallest record timestamp, and how reads teach it.

Job: on the driver, ``SmallestTimestamps.of`` answers a segment's smallest timestamp
from its writer's record (rlmm's manifest version 2, through the layout) or else from
rlmm's side index (``remote.side_index``: read once per partition, on first need, with
one listing); the planner skips a segment whose smallest timestamp is after a window.
On an executor, ``record_smallest_timestamp`` writes what a read of a whole byte range of a segment
learned (the reader checks it saw every record of the range).

Invariants: a value comes only from a record of every byte of the segment; unknown is
None and never guessed, so an unknown segment is read as if there were no smallest
timestamps at all. A side index that cannot be read or written is logged once per
location in a process and otherwise ignored: no read fails or changes because of it.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from remote.errors import SideIndexError
from remote.layouts import RemoteLayout
from remote.side_index import Entry, SideIndex, smallest_of
from rlmm.factory import open_side_index
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

log = logging.getLogger(__name__)

_lock = threading.Lock()
_indexes: dict[str, SideIndex] = {}
_failed: set[str] = set()  # locations whose failure was logged in this process


def _side_index(location: str, remote_options: Mapping[str, Any]) -> SideIndex | None:
    """The process's SideIndex for ``location`` (built once); None when it cannot be."""
    key = json.dumps([location, dict(remote_options)], sort_keys=True, default=str)
    with _lock:
        index = _indexes.get(key)
        if index is None:
            try:
                index = _indexes[key] = open_side_index(location, remote_options)
            except Exception as e:  # a bad location or S3 settings: read on without it
                _failed_once(location, e)
                return None
            atexit.register(index.close)  # one per location and process: kept till exit
        return index


def _failed_once(location: str, error: BaseException) -> None:
    if location not in _failed:
        _failed.add(location)
        log.warning(
            "side index %s cannot be used (%s); reading on without it (segments whose"
            " writer recorded no smallest timestamp are read whole, as before)",
            location,
            error,
        )


class SmallestTimestamps:
    """The smallest timestamps one planner knows (a partition's entries read once)."""

    def __init__(
        self, layout: RemoteLayout, location: str | None, remote_options: Mapping[str, Any]
    ) -> None:
        self.layout = layout
        self.location = location
        self.remote_options = remote_options
        self._entries: dict[TopicIdPartition, dict[uuid.UUID, list[Entry]]] = {}

    def recorded(self, segment: RemoteLogSegmentMetadata) -> int | None:
        """The writer's own record (no I/O)."""
        return self.layout.smallest_timestamp(segment)

    def of(self, segment: RemoteLogSegmentMetadata) -> int | None:
        """The segment's smallest record timestamp; None when unknown."""
        found = self.recorded(segment)
        if found is not None or self.location is None:
            return found
        tp = segment.remote_log_segment_id.topic_id_partition
        entries = self._entries.get(tp)
        if entries is None:
            entries = self._entries[tp] = self._read(tp)
        ranges = entries.get(segment.remote_log_segment_id.id)
        return None if ranges is None else smallest_of(ranges, segment.segment_size_in_bytes)

    def _read(self, tp: TopicIdPartition) -> dict[uuid.UUID, list[Entry]]:
        assert self.location is not None
        index = _side_index(self.location, self.remote_options)
        if index is None:
            return {}
        try:
            return index.read(tp)
        except SideIndexError as e:
            _failed_once(self.location, e)
            return {}


def record_smallest_timestamp(
    location: str,
    remote_options: Mapping[str, Any],
    segment: RemoteLogSegmentMetadata,
    entry: Entry,
) -> None:
    """Keep what a read learned of ``segment`` (never raises: logged once per location)."""
    index = _side_index(location, remote_options)
    if index is None:
        return
    segment_id = segment.remote_log_segment_id
    try:
        index.write(segment_id.topic_id_partition, segment_id.id, entry)
    except (SideIndexError, ValueError) as e:
        _failed_once(location, e)


__all__ = ["SmallestTimestamps", "record_smallest_timestamp"]
