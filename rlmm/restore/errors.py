"""Errors of ``rlmm restore``: every one derives from RestoreError (a RemoteStorageError).

Invariant: a RestoreInputError is raised before anything is written to the target
cluster (the CLI's exit 2 with one line); every message names what it is about: the
topic-partition, the offsets, the saved source or the target topic.
"""

from __future__ import annotations

from rlmm.errors import RemoteStorageError


class RestoreError(RemoteStorageError):
    """Base of the restore's errors."""


class RestoreInputError(RestoreError):
    """Bad input, found before anything was written to the target."""


class UnknownSourceError(RestoreInputError):
    """The topic or a partition is not in the archive, or no archive is where the
    ``[remote]`` settings say."""


class RangeOutsideArchiveError(RestoreInputError):
    """The offset or timestamp range reaches outside what the archive holds."""


class TargetNotEmptyError(RestoreInputError):
    """The target topic holds committed data (or another restore's progress) and the
    run was not told to resume it."""


class ResumeMismatchError(RestoreInputError):
    """The saved progress for the target belongs to another source or range."""


class PartitionCountMismatchError(RestoreInputError):
    """The target's partition count differs from the source's and no partitioner was
    chosen to re-spread the records."""


class SharedTargetError(RestoreInputError):
    """Two selections of one run would restore into one target topic (a library call:
    the CLI gives each source topic a target of its own)."""


class TopicConfigError(RestoreInputError):
    """The configs a new target topic would be created with cannot be used (the target
    cluster refuses them, or no acks=all write would succeed under them), or those kept
    for the source topic cannot be read."""


class MissingSegmentsError(RestoreError):
    """Offsets inside the range are not in the archive: the restore stopped before them
    (everything up to the gap is committed, and ``--resume --skip-missing`` goes on)."""

    def __init__(self, message: str, topic: str, partition: int, first: int, last: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.first_offset = first
        self.last_offset = last


class TargetClusterError(RestoreError):
    """The target cluster refused or failed a request (the client's error is the cause)."""


__all__ = [
    "MissingSegmentsError",
    "PartitionCountMismatchError",
    "RangeOutsideArchiveError",
    "RestoreError",
    "RestoreInputError",
    "ResumeMismatchError",
    "SharedTargetError",
    "TargetClusterError",
    "TargetNotEmptyError",
    "TopicConfigError",
    "UnknownSourceError",
]
