"""Partitioned, durable event log (transport only: knows bytes and offsets).

``load_event_log(config)`` builds the backend named by ``config["type"]`` (``file``,
``kafka`` or ``memory``), importing its module lazily; ``known_options(type)`` is that
backend's settings (its constructor's arguments), which the loader, rlmm's config
check and the docs all ask, so a setting is known in one place.

Invariant: this package imports no sibling package (eventlog is a leaf).
"""

from __future__ import annotations

import inspect
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

EVENT_LOG_TYPES = ("file", "kafka", "memory")
# Constructor arguments that take Python objects: no configuration file can give them.
_OBJECT_ARGUMENTS = frozenset({"ssl_context", "sasl_oauth_token_provider"})


def _backend(kind: str) -> type[EventLog]:
    """The class of one event log type (its module imported on first use)."""
    if kind == "memory":
        from eventlog.memory import MemoryEventLog

        return MemoryEventLog
    if kind == "file":
        from eventlog.file import FileEventLog

        return FileEventLog
    if kind == "kafka":
        from eventlog.kafka import KafkaEventLog

        return KafkaEventLog
    raise EventLogConfigError(
        f"unknown event log type {kind!r} (expected {', '.join(EVENT_LOG_TYPES[:-1])}"
        f" or {EVENT_LOG_TYPES[-1]})"
    )


def known_options(kind: str) -> frozenset[str]:
    """The settings of one event log type, besides ``type``: its constructor's arguments
    (those a configuration can give)."""
    params = inspect.signature(_backend(kind)).parameters.values()
    return frozenset(
        p.name
        for p in params
        if p.name != "self" and p.kind is not p.VAR_KEYWORD and p.name not in _OBJECT_ARGUMENTS
    )


def load_event_log(config: Mapping[str, Any]) -> EventLog:
    """Build the configured backend: ``config["type"]`` is file, kafka or memory.

    The other keys are the backend's constructor arguments. Backends are imported
    lazily so that a missing optional dependency only matters when it is used.
    """
    options = dict(config)
    kind = options.pop("type", "file")
    return _backend(kind)(**options)


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
    "EVENT_LOG_TYPES",
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
    "known_options",
    "load_event_log",
]
