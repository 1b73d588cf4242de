"""The broker's plugin properties over rlmm's TOML: one RlmmConfig for ``rlmm serve``.

Kafka hands each plugin class the properties under its prefix (``rsm.config.`` /
``rlmm.config.``, stripped) and adds its own: ``broker.id`` to both; ``log.dir``,
``cluster.id`` and, with ``remote.log.metadata.manager.listener.name`` set, the
listener's ``remote.log.metadata.common.client.bootstrap.servers`` and
``.security.protocol`` to the RLMM. Kafka's TopicBasedRemoteLogMetadataManager reads
its ``remote.log.metadata.*`` settings from the same prefix.

Invariant: the TOML names the stores, the snapshots and ``data_dir``; the broker's
properties win for what the broker knows (its id, its cluster's bootstrap and
security, the ``remote.log.metadata.*`` settings, with Kafka's meaning). A TOML that
names no event log type gets Kafka's ``__remote_log_metadata`` on the broker's own
cluster, since that is what a broker's RLMM is. A ``broker_id`` in the TOML that
differs from the broker's is refused, naming both.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eventlog.registry import backend
from rlmm.config import RlmmConfig, flatten_table, load_config, parse_scalar
from rlmm.errors import ConfigError

# The bridge's own keys: they say how to reach this process, not how it tiers.
BRIDGE_KEYS = frozenset(
    {"file", "command", "socket", "call.timeout.ms", "copy.timeout.ms", "start.timeout.ms",
     "fetch.chunk.bytes", "fetch.file.reads", "list.cache.segments"}
)  # fmt: skip
_METADATA_PREFIX = "remote.log.metadata."
# A broker's RLMM keeps its metadata where Kafka's own TopicBasedRemoteLogMetadataManager
# does (the cluster's __remote_log_metadata), unless the TOML says otherwise: then a
# cluster moves between the two with a rolling restart and keeps every segment.
BROKER_EVENT_LOG_TYPE = "kafka"
# What Kafka adds for its own use (the log dir is the broker's, never ours to write).
_BROKER_ONLY = frozenset({"log.dir", "cluster.id"})


def _file_settings(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with path.open("rb") as f:
            return flatten_table(tomllib.load(f))
    except FileNotFoundError as e:
        raise ConfigError(
            f"config file {path} (rsm.config.file / rlmm.config.file) does not exist"
        ) from e
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e


def broker_overrides(
    path: Path | None, props: Mapping[str, str], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The overrides the broker's ``props`` make over the TOML at ``path``."""
    file = _file_settings(path)
    overrides: dict[str, Any] = {}
    broker_id = props.get("broker.id")
    if broker_id is not None:
        try:
            ours = int(broker_id)
        except ValueError as e:
            raise ConfigError(f"the broker passed broker.id = {broker_id!r}, not an int") from e
        configured = file.get("broker_id")
        if configured is not None and configured != ours:
            raise ConfigError(
                f"broker_id = {configured} in {path}, but the broker that started rlmm serve"
                f" is broker.id {ours}: remove broker_id from the file (the broker's is used)"
            )
        overrides["broker_id"] = ours
    kind = file.get("eventlog.type", (env or {}).get("RLMM_EVENTLOG_TYPE"))
    if kind is None:
        overrides["eventlog.type"] = kind = BROKER_EVENT_LOG_TYPE
    if backend(str(kind)).kafka_client:
        for key, value in props.items():
            if key.startswith(_METADATA_PREFIX):
                overrides[key] = parse_scalar(str(value))
    return overrides


def broker_config(
    path: Path | None,
    props: Mapping[str, str],
    *,
    overrides: Mapping[str, Any] | None = None,
) -> RlmmConfig:
    """The configuration ``rlmm serve`` runs with for one plugin class's ``props``
    (command-line ``overrides`` win over both)."""
    merged = {**broker_overrides(path, props), **dict(overrides or {})}
    return load_config(path, overrides=merged)


def unknown_props(props: Mapping[str, str]) -> list[str]:
    """Properties the plugin does not use (logged once, never refused: Kafka passes
    every key under the prefix, Kafka's own RLMM settings included)."""
    return sorted(
        k
        for k in props
        if k not in BRIDGE_KEYS
        and k not in _BROKER_ONLY
        and k != "broker.id"
        and not k.startswith(_METADATA_PREFIX)
    )


__all__ = ["BRIDGE_KEYS", "broker_config", "broker_overrides", "unknown_props"]
