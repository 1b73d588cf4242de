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
    """Another process owns the log directory as its writer: ``dir`` is the directory,
    ``holder`` the pid the writer wrote into its LOCK file ("unknown" if none)."""

    def __init__(self, message: str, *, dir: str = "", holder: str = "unknown") -> None:
        super().__init__(message)
        self.dir = dir
        self.holder = holder


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


class EventLogRefusedError(EventLogTransportError):
    """Every bootstrap server refused the connection: nothing listens there (a broker
    that is down, or a wrong address), which is not a broker still starting (that one
    accepts connections, then answers late). Retriable, for a shorter while."""


class EventLogStorageError(EventLogError):
    """A local disk operation failed (write, fsync, roll); the file log stops accepting
    writes until it is reopened, which recovers the files to the last durable batch."""


class InvalidRecordError(EventLogError, TypeError):
    """A value or key that is not bytes-like; nothing is written."""


class InvalidOffsetError(EventLogError, ValueError):
    """A negative or otherwise impossible offset argument (the message names it)."""


class EventLogRecordTooLargeError(EventLogError, ValueError):
    """A record or batch exceeds the backend's size limit (names partition and size)."""


class OffsetBeforeLogStartError(EventLogError):
    """A read below the partition's log start: retention deleted those offsets.

    Not a gap to skip: the reader must start from a snapshot whose applied offset for
    ``partition`` is at least ``log_start - 1``. ``start_from`` maps each owner
    registered on the log to its own description of such a snapshot (its newest one
    first) so the message can say where to go.
    """

    def __init__(
        self,
        partition: int,
        requested: int,
        log_start: int,
        start_from: dict[str, object] | None = None,
    ) -> None:
        hints = "; ".join(f"{owner}: {where}" for owner, where in (start_from or {}).items())
        super().__init__(
            f"partition {partition}: offset {requested} requested but the log starts at "
            f"{log_start} (older segments were deleted by retention); start from a snapshot "
            f"that covers partition {partition} up to offset {log_start - 1} or later"
            + (f" ({hints})" if hints else " (no owner registered one)")
        )
        self.partition = partition
        self.requested = requested
        self.log_start = log_start
        self.start_from = dict(start_from or {})


class EventLogAuthError(EventLogTransportError):
    """Kafka refused this client: who it is (SASL, TLS) or what it asked (an ACL).

    Never retriable: only an operator changing a credential, a certificate or an ACL
    helps. The message is one line that says which of them, and never holds a secret.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class EventLogAuthorizationError(EventLogAuthError):
    """A principal without an ACL: names the principal, the operation and the topic."""

    def __init__(self, principal: str, operation: str, topic: str, detail: str) -> None:
        self.principal = principal
        self.operation = operation
        self.topic = topic
        super().__init__(
            f"{principal} is not allowed to {operation} topic {topic} ({detail}); an admin"
            f" grants it with: kafka-acls --add --allow-principal {principal}"
            f" --operation {operation.title().replace('_', '')} --topic {topic}"
        )
