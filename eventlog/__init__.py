"""Partitioned, durable event log (transport only: knows bytes and offsets).

Where things live: ``log`` (the EventLog ABC), one module per backend (``file``,
``kafka``, ``memory``), ``registry`` (every ``eventlog.type``: ``load_event_log``
builds the configured one, ``known_options`` lists a type's settings for rlmm's config
check and the docs), ``errors``; private helpers in ``_``-prefixed modules.

Invariant: this package imports no sibling package (eventlog is a leaf); backends
load on first use.
"""

from __future__ import annotations

from typing import Any

from eventlog.errors import (
    EventLogClosedError,
    EventLogConfigError,
    EventLogCorruptError,
    EventLogError,
    EventLogLockedError,
    EventLogReadOnlyError,
    EventLogRefusedError,
    EventLogTransportError,
    OffsetBeforeLogStartError,
    UnknownPartitionError,
)
from eventlog.log import EventLog
from eventlog.registry import (
    EVENT_LOG_BACKENDS,
    EVENT_LOG_TYPES,
    backend,
    known_options,
    load_event_log,
)


def __getattr__(name: str) -> Any:
    # Backends load on first use (kafka pulls in aiokafka's network stack).
    for kind, path in EVENT_LOG_BACKENDS.items():
        if path.endswith(f":{name}"):
            return backend(kind)
    raise AttributeError(name)


__all__ = [
    "EVENT_LOG_TYPES",
    "EventLog",
    "EventLogClosedError",
    "EventLogConfigError",
    "EventLogCorruptError",
    "EventLogError",
    "EventLogLockedError",
    "EventLogReadOnlyError",
    "EventLogRefusedError",
    "EventLogTransportError",
    "FileEventLog",
    "KafkaEventLog",
    "MemoryEventLog",
    "OffsetBeforeLogStartError",
    "UnknownPartitionError",
    "known_options",
    "load_event_log",
]
