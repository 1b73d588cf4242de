"""Errors of the archive reader: every one derives from rlmm.errors.RemoteStorageError.

Invariant: each message names what it is about: the topic-partition and offsets of
a gap, the segment id, object and byte position of a bad batch, the option of a bad
request.
"""

from __future__ import annotations

from rlmm.errors import RemoteStorageError


class ArchiveError(RemoteStorageError):
    """Base of the archive reader's errors (bad requests, unreadable metadata)."""


class DataLossError(ArchiveError):
    """Records the request covers are not in the archive (a gap in the lineage), or a
    batch that cannot be decoded (CRC mismatch, corrupt records)."""


class CorruptBatchError(DataLossError):
    """A record batch of a remote segment failed its CRC or could not be decoded."""

    def __init__(self, message: str, segment_id: str, object_name: str, position: int) -> None:
        super().__init__(message)
        self.segment_id = segment_id
        self.object_name = object_name
        self.position = position


__all__ = ["ArchiveError", "CorruptBatchError", "DataLossError"]
