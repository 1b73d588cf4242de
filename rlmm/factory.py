"""Builds the configured parts (event log, remote storage, manager) from an RlmmConfig.

Invariant: the only place where configuration turns into objects; backend
configuration errors come out as rlmm.errors.ConfigError naming the setting.
"""

from __future__ import annotations

from typing import Any

from eventlog import EventLog, EventLogConfigError, load_event_log
from remote import RemoteStorageManager, load_remote_storage_manager
from remote.layouts import READ_ONLY_TYPES, RemoteLayout, load_remote_layout
from rlmm.config import RlmmConfig
from rlmm.errors import ConfigError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.snapshotting import snapshot_policy


def open_event_log(config: RlmmConfig) -> EventLog:
    """The configured event log (not started: ``await log.start()`` or ``async with``)."""
    options: dict[str, Any] = config.event_log_options()
    properties = options.pop("properties", None)
    try:
        if options.get("type") == "kafka":
            from eventlog.kafka import KafkaEventLog

            options.pop("type")
            if "bootstrap_servers" not in options:
                raise ConfigError(
                    "eventlog.type = 'kafka' needs eventlog.bootstrap_servers (or Kafka's"
                    " remote.log.metadata.common.client.bootstrap.servers)"
                )
            props = dict(properties or {})
            # from_properties validates that Kafka's bootstrap property is present.
            servers = options["bootstrap_servers"]
            props.setdefault(
                "remote.log.metadata.common.client.bootstrap.servers",
                servers if isinstance(servers, str) else ",".join(servers),
            )
            return KafkaEventLog.from_properties(props, **options)
        return load_event_log(options)
    except (EventLogConfigError, TypeError) as e:
        raise ConfigError(f"bad event log settings {sorted(options)}: {e}") from e


def open_remote_storage(config: RlmmConfig) -> RemoteStorageManager:
    """The RemoteStorageManager that copies segments (rlmm's own layout: local or s3)."""
    options = config.remote_options()
    if options.get("type") in READ_ONLY_TYPES:
        raise ConfigError(
            f"remote.type = {options['type']!r} is a Kafka cluster's own remote tier, read"
            " as it is: rlmm reads it but never copies into it (the offloader writes rlmm's"
            " layout: remote.type = 'local' or 's3')"
        )
    return load_remote_storage_manager(options)


def open_remote_layout(config: RlmmConfig) -> RemoteLayout:
    """The read side of the configured remote tier (any layout)."""
    return load_remote_layout(config.remote_options())


def create_manager(
    config: RlmmConfig, event_log: EventLog, *, close_event_log: bool = True
) -> TopicBasedRemoteLogMetadataManager:
    """A manager over ``event_log`` with the configured snapshot policy (not started)."""
    return TopicBasedRemoteLogMetadataManager(
        event_log,
        write_timeout_s=float(config.manager["write_timeout_s"]),
        snapshot_policy=snapshot_policy(config),
        close_event_log=close_event_log,
    )
