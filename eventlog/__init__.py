"""Partitioned, durable event log (transport only: knows bytes and offsets).

Invariant: this package imports no sibling package (eventlog is a leaf).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventlog.errors import (
    EventLogClosedError,
    EventLogConfigError,
    EventLogCorruptError,
    EventLogError,
    EventLogLockedError,
    EventLogReadOnlyError,
    EventLogTransportError,
    OffsetBeforeLogStartError,
    UnknownPartitionError,
)
from eventlog.log import EventLog


def load_event_log(config: Mapping[str, Any]) -> EventLog:
    """Build the configured backend: ``config["type"]`` is file, kafka or memory.

    The other keys are the backend's constructor arguments. Backends are imported
    lazily so that a missing optional dependency only matters when it is used.
    """
    options = dict(config)
    kind = options.pop("type", "file")
    if kind == "memory":
        from eventlog.memory import MemoryEventLog

        return MemoryEventLog(**options)
    if kind == "file":
        from eventlog.file import FileEventLog

        return FileEventLog(**options)
    if kind == "kafka":
        from eventlog.kafka import KafkaEventLog

        return KafkaEventLog(**options)
    raise EventLogConfigError(f"unknown event log type {kind!r} (expected file, kafka or memory)")


def __getattr__(name: str) -> Any:
    # Backends load on first use (kafka pulls in aiokafka's network stack).
    if name == "MemoryEventLog":
        from eventlog.memory import MemoryEventLog

        return MemoryEventLog
    if name == "FileEventLog":
        from eventlog.file import FileEventLog

        return FileEventLog
    if name == "KafkaEventLog":
        from eventlog.kafka import KafkaEventLog

        return KafkaEventLog
    raise AttributeError(name)


__all__ = [
    "EventLog",
    "EventLogClosedError",
    "EventLogConfigError",
    "EventLogCorruptError",
    "EventLogError",
    "EventLogLockedError",
    "EventLogReadOnlyError",
    "EventLogTransportError",
    "FileEventLog",
    "KafkaEventLog",
    "MemoryEventLog",
    "OffsetBeforeLogStartError",
    "UnknownPartitionError",
    "load_event_log",
]
