"""The event log registry: every ``eventlog.type``, its class and its settings.

``EVENT_LOG_BACKENDS`` maps each type name to its class (``module:Class``). The factory
(``load_event_log``), the config check (``known_options``, asked by rlmm's config) and
the docs all read it: a new backend is one module plus one entry here.

Invariants: this module imports no backend at import time (kafka pulls in aiokafka's
network stack); a type's settings are its class's ``from_options`` arguments: the
constructor's, less those that take Python objects, plus the class's
``extra_options``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from eventlog.errors import EventLogConfigError
from eventlog.log import EventLog

EVENT_LOG_BACKENDS: Mapping[str, str] = {
    "file": "eventlog.file:FileEventLog",
    "kafka": "eventlog.kafka:KafkaEventLog",
    "memory": "eventlog.memory:MemoryEventLog",
}
EVENT_LOG_TYPES = tuple(EVENT_LOG_BACKENDS)
# Constructor arguments that take Python objects: no configuration file can give them.
_OBJECT_ARGUMENTS = frozenset({"ssl_context", "sasl_oauth_token_provider"})


def backend(kind: str) -> type[EventLog]:
    """The class of one event log type (its module imported on first use)."""
    path = EVENT_LOG_BACKENDS.get(kind)
    if path is None:
        raise EventLogConfigError(
            f"unknown event log type {kind!r} (expected {', '.join(EVENT_LOG_TYPES[:-1])}"
            f" or {EVENT_LOG_TYPES[-1]})"
        )
    module, _, name = path.partition(":")
    cls: type[EventLog] = getattr(importlib.import_module(module), name)
    return cls


def known_options(kind: str) -> frozenset[str]:
    """The settings of one event log type, besides ``type`` (those a configuration can
    give)."""
    cls = backend(kind)
    params = inspect.signature(cls).parameters.values()
    return cls.extra_options | frozenset(
        p.name
        for p in params
        if p.name != "self" and p.kind is not p.VAR_KEYWORD and p.name not in _OBJECT_ARGUMENTS
    )


def load_event_log(config: Mapping[str, Any]) -> EventLog:
    """Build the configured backend: ``config["type"]`` is file (default), kafka or
    memory; the other keys are its settings (``known_options``)."""
    options = dict(config)
    return backend(options.pop("type", "file")).from_options(options)


__all__ = ["EVENT_LOG_BACKENDS", "EVENT_LOG_TYPES", "backend", "known_options", "load_event_log"]
