"""Partitioned, durable event log (transport only: knows bytes and offsets).

Where things live: ``log`` (the EventLog ABC), one module per backend (``file``,
``kafka``, ``memory``), ``registry`` (every ``eventlog.type``: ``load_event_log``
builds the configured one, ``known_options`` lists a type's settings for rlmm's config
check and the docs), ``errors``, ``kafka_client`` (the Kafka client layer the kafka
backend shares with rlmm's offloader and restore); private helpers in ``_``-prefixed
modules.

Invariant: this package imports no sibling package (eventlog is a leaf), and imports
no backend: ``eventlog.file.FileEventLog``, ``eventlog.kafka.KafkaEventLog`` (which
loads aiokafka's network stack) and ``eventlog.memory.MemoryEventLog`` are imported from
their modules.
"""

from __future__ import annotations

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
from eventlog.registry import EVENT_LOG_TYPES, known_options, load_event_log

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
    "OffsetBeforeLogStartError",
    "UnknownPartitionError",
    "known_options",
    "load_event_log",
]
