"""Errors of the event log: all derive from EventLogError.

Invariant: messages name the partition, file and byte position or offset concerned.
"""

from __future__ import annotations


class EventLogError(Exception):
    """Base of every event log error."""

    retriable: bool = False


class UnknownPartitionError(EventLogError, ValueError):
    """A partition number outside [0, partition_count)."""


class EventLogClosedError(EventLogError):
    """The log was closed."""


class EventLogLockedError(EventLogError):
    """Another process owns the log directory as its writer."""


class EventLogReadOnlyError(EventLogError):
    """A write on a log opened read-only."""


class EventLogCorruptError(EventLogError):
    """Stored bytes fail validation (CRC, framing); names the file and position."""

    def __init__(self, message: str, path: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.position = position


class EventLogConfigError(EventLogError, ValueError):
    """An invalid event log setting (the message names it)."""


class EventLogTransportError(EventLogError):
    """A failure talking to the backend (e.g. Kafka broker); ``retriable`` says if retry helps."""

    def __init__(self, message: str, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class EventLogStorageError(EventLogError):
    """A local disk operation failed (write, fsync, roll); the file log stops accepting
    writes until it is reopened, which recovers the files to the last durable batch."""


class InvalidRecordError(EventLogError, TypeError):
    """A value or key that is not bytes-like; nothing is written."""


class InvalidOffsetError(EventLogError, ValueError):
    """A negative or otherwise impossible offset argument (the message names it)."""


class EventLogRecordTooLargeError(EventLogError, ValueError):
    """A record or batch exceeds the backend's size limit (names partition and size)."""
