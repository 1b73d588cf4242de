"""Errors of the offloader: every one derives from rlmm.errors.RemoteStorageError.

Invariant: each error names the partition, segment file or setting it is about, and
says whether the next round may succeed (``retriable``).
"""

from __future__ import annotations

from rlmm.errors import RemoteStorageError


class OffloadError(RemoteStorageError):
    """Base of the offloader's errors."""


class SegmentCopyError(OffloadError):
    """One segment could not be copied (bad local files, RSM failure); names the file."""

    def __init__(self, message: str, *, path: str | None = None, retriable: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.retriable = retriable


class LogDirError(OffloadError):
    """A Kafka log dir (or one of its checkpoint files) that cannot be read."""


class ForeignSegmentError(OffloadError):
    """A change asked for a segment rlmm did not write (Kafka's own tiering, another
    tool): refused, since rlmm changes only what it wrote. Names the segment."""


class LeadershipError(OffloadError):
    """Which partitions this broker leads cannot be learned, or the sidecar's place in
    the cluster is wrong (a node id that differs, a metadata log others cannot share)."""


__all__ = [
    "ForeignSegmentError",
    "LeadershipError",
    "LogDirError",
    "OffloadError",
    "SegmentCopyError",
]
