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


class StoreRemedyError(ArchiveError):
    """An error whose remedy is reading the archive from the remote store alone.

    ``problem`` says what is wrong; ``with_remedy`` adds how to read the store alone in
    the caller's terms (the library's ``from_store=True``, the CLI's ``--from-store``,
    the Spark source's ``fromStore`` option). Where that would not help
    (``remedy_applies`` false: the store alone was read already) the message is the
    problem alone.
    """

    LIBRARY_REMEDY = "from_store=True"

    def __init__(self, problem: str, *, remedy_applies: bool = True) -> None:
        self.problem = problem
        self.remedy_applies = remedy_applies
        super().__init__(self.with_remedy(self.LIBRARY_REMEDY))

    def with_remedy(self, remedy: str) -> str:
        if not self.remedy_applies:
            return self.problem
        return f"{self.problem}; to read the archive from the remote store alone: {remedy}"


class MetadataLogUnavailableError(StoreRemedyError):
    """The metadata log (the event log, or Kafka's ``__remote_log_metadata``) cannot be
    read: missing, unreachable or refused. The message names the event log and the
    configuration it came from."""


class EmptyViewError(StoreRemedyError):
    """The metadata lists no segment while the remote store holds segment objects: the
    metadata is not this store's, or it was lost (read as it is, every object would look
    like garbage). The message names the store and how many objects it holds."""


__all__ = [
    "ArchiveError",
    "CorruptBatchError",
    "DataLossError",
    "EmptyViewError",
    "MetadataLogUnavailableError",
    "StoreRemedyError",
]
