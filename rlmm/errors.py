"""Errors of the RLMM and of remote storage: every one derives from RemoteStorageError.

Invariant: each error says whether a retry can help (``retriable``) and names the
partition, segment id, file or offset it is about in its message.
"""

from __future__ import annotations


class RemoteStorageError(Exception):
    """Base of every error raised by rlmm, remote storage and the metadata manager."""

    retriable: bool = False


class RemoteStorageNotReadyError(RemoteStorageError):
    """The partition is assigned but its metadata is not caught up yet; retry later."""

    retriable = True

    # the partition (a TopicIdPartition: the model is above this module) or None
    def __init__(self, partition: object = None, message: str | None = None) -> None:
        self.partition = partition
        if message is None:
            message = (
                f"remote log metadata for {partition} is not ready yet (still catching up)"
                if partition is not None
                else "remote log metadata manager is not ready yet"
            )
        super().__init__(message)


class RemoteResourceNotFoundError(RemoteStorageError):
    """An unknown segment, index, partition or remote object."""


class InvalidStateTransitionError(RemoteStorageError):
    """A segment or partition-delete state change that KIP-405 does not allow."""


class CodecError(RemoteStorageError):
    """Bytes that are not a valid RemoteLogMetadataSerde record."""


class RemoteStorageTimeoutError(RemoteStorageError):
    """An operation did not complete within its configured time."""

    retriable = True


class ConfigError(RemoteStorageError):
    """An invalid or unknown configuration setting (the message names the key)."""


class SnapshotBlockError(RemoteStorageNotReadyError):
    """A user partition's cache block in a restored snapshot does not decode.

    Raised on the partition's first use (blocks are decoded lazily); the manager then
    replays that metadata partition from the log instead of trusting the snapshot, so
    the partition is not ready until it catches up (hence a retriable not-ready error).
    """

    def __init__(self, partition: object, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(
            partition, f"the cached metadata of {partition} in {source} is corrupt: {reason}"
        )


class ReplayGapError(RemoteStorageError):
    """A replay needs offsets the event log no longer holds (deleted by retention) and
    no snapshot covers them: the state would be silently incomplete."""
