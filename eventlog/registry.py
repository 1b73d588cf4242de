"""The event log registry: every ``eventlog.type``, its class and its settings.

``EVENT_LOG_BACKENDS`` maps each built-in type name to its class (``module:Class``);
other packages add types as entry points of the group ``rlmm.event_logs`` (the entry
point's name is the type, its value an EventLog subclass), as fsspec's
``fsspec.specs`` do. The factory (``load_event_log``), the config check
(``known_options``, asked by rlmm's config) and the docs all read this module: a new
built-in backend is one module plus one entry here, a third-party one an entry point.

Invariants: this module imports no backend at import time (kafka pulls in aiokafka's
network stack), and an installed one only when its type is asked for; a built-in name
wins over an installed one; rlmm asks a type's class what it can do (its capability
attributes: ``shared``, ``directory_option``, ``kafka_client``), never its name; a
type's settings are what its class's ``options()`` names (by default the constructor's
arguments plus the class's ``extra_options``; the kafka type's settings object's keys),
read without building anything; an unknown type, or an installed one that does not load, is an
EventLogConfigError naming the group and the installed types (or the distribution
and the error).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from eventlog.errors import EventLogConfigError
from eventlog.log import EventLog

EVENT_LOG_BACKENDS: Mapping[str, str] = {
    "file": "eventlog.file:FileEventLog",
    "kafka": "eventlog.kafka:KafkaEventLog",
    "memory": "eventlog.memory:MemoryEventLog",
}
EVENT_LOG_TYPES = tuple(EVENT_LOG_BACKENDS)
# The entry point group through which other packages install event log types.
ENTRY_POINT_GROUP = "rlmm.event_logs"


def backend(kind: str) -> type[EventLog]:
    """The class of one event log type (its module imported on first use): a built-in
    one, else the entry point of that name in ``ENTRY_POINT_GROUP``."""
    path = EVENT_LOG_BACKENDS.get(kind) if isinstance(kind, str) else None
    if path is not None:
        module, _, name = path.partition(":")
        cls: type[EventLog] = getattr(importlib.import_module(module), name)
        return cls
    found = entry_points(group=ENTRY_POINT_GROUP, name=kind)
    if not found:
        installed = sorted(installed_types()) or ["none"]
        raise EventLogConfigError(
            f"unknown event log type {kind!r} (built in: {', '.join(EVENT_LOG_TYPES)};"
            f" installed as entry points of {ENTRY_POINT_GROUP}: {', '.join(installed)})"
        )
    return _installed_backend(next(iter(found)))


def installed_types() -> tuple[str, ...]:
    """The event log types other packages install (entry points of
    ``ENTRY_POINT_GROUP``; a built-in name among them stays the built-in)."""
    return tuple(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def _installed_backend(ep: EntryPoint) -> type[EventLog]:
    where = f"event log type {ep.name!r} ({ep.value}, entry point of {ep.group}"
    if ep.dist is not None:
        where += f" in {ep.dist.name} {ep.dist.version}"
    try:
        loaded = ep.load()
    except Exception as e:  # whatever the package's import raises
        raise EventLogConfigError(f"{where}) failed to load: {type(e).__name__}: {e}") from e
    if not (isinstance(loaded, type) and issubclass(loaded, EventLog)):
        raise EventLogConfigError(f"{where}) is {loaded!r}, not an eventlog.EventLog subclass")
    return loaded


def known_options(kind: str) -> frozenset[str]:
    """The settings of one event log type, besides ``type`` (those a configuration can
    give): its class's ``EventLog.options()``."""
    return frozenset(backend(kind).options())


def types_where(test: Callable[[type[EventLog]], bool]) -> tuple[str, ...]:
    """The built-in types whose class passes ``test`` (a question about the class's
    capabilities: ``shared``, ``directory_option``, ``kafka_client``), for a message
    that names the types that would do."""
    return tuple(kind for kind in EVENT_LOG_TYPES if test(backend(kind)))


def log_start_offsets(config: Mapping[str, Any]) -> dict[int, int]:
    """Each partition's first retained offset in the configured log, read without
    opening it (``EventLog.log_start_offsets``); empty when its type cannot tell."""
    return backend(config.get("type", "file")).log_start_offsets(config)


def load_event_log(config: Mapping[str, Any]) -> EventLog:
    """Build the configured backend: ``config["type"]`` is file (default), kafka,
    memory or an installed type; the other keys are its settings (``known_options``)."""
    options = dict(config)
    return backend(options.pop("type", "file")).from_options(options)


__all__ = [
    "ENTRY_POINT_GROUP",
    "EVENT_LOG_BACKENDS",
    "EVENT_LOG_TYPES",
    "backend",
    "installed_types",
    "known_options",
    "load_event_log",
    "log_start_offsets",
    "types_where",
]
