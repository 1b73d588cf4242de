"""Configuration: a frozen, validated RlmmConfig built by an explicit load_config() call.

Invariant: precedence is overrides (CLI flags) > ``RLMM_<SECTION>_<KEY>`` environment
variables > the TOML file > defaults; every key is known (an unknown one is a
ConfigError naming it, where it came from and the known ones; ``[eventlog]`` and
``[remote]`` keys are checked against their backend's own), and Kafka's own dotted
property names (``remote.log.metadata.*``) are accepted at the top level, under
``[eventlog]`` and under ``[eventlog.properties]`` alike: those with an event log
setting of their own become that setting (one name for one setting in a layer), the
rest are handed to the Kafka event log. Nothing here runs at import time.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from eventlog import EventLog, EventLogConfigError
from eventlog.registry import EVENT_LOG_TYPES, backend, known_options, types_where
from remote.registry import check_remote_options
from rlmm.errors import ConfigError
from snapshot.registry import SNAPSHOT_STORE_TYPES

# Sections whose keys we validate ourselves; the [remote] keys are checked against the
# configured backend's own (remote.registry.check_remote_options), the [eventlog] keys
# against its event log type's (eventlog.known_options), both in _validate.
DEFAULTS: dict[str, Any] = {
    "broker_id": 0,
    "data_dir": "data/rlmm",
    "manager": {"write_timeout_s": 30.0, "ready_timeout_s": 120.0},
    "eventlog": {"type": "file", "partitions": 50},
    "snapshot": {
        "enabled": True,
        "every_events": 100_000,
        "interval_s": 300.0,
        "keep": 2,
        "store": "local",
        "retention": True,
    },
    "remote": {"type": "local"},
    # The read side. side_index: where rlmm keeps the smallest timestamps it learns of
    # segments whose writer did not record them (rlmm.archive.smallest_timestamps):
    # "auto" (data_dir/side-index), "off", a directory or "s3://bucket/prefix".
    "archive": {"side_index": "auto"},
    # The offloader (`rlmm offload`): Kafka's names; per-topic overrides of the five
    # topic-level ones go under [offload.topics.<topic>].
    "offload": {
        "remote.storage.enable": True,
        "retention.ms": 7 * 24 * 3600 * 1000,
        "retention.bytes": -1,
        "local.retention.ms": -2,
        "local.retention.bytes": -2,
        "remote.log.manager.task.interval.ms": 30_000,
        "remote.log.manager.copier.thread.pool.size": 4,
        "verify.crc": True,
        # KIP-950: stop copying (remote data stays readable, retention runs); with
        # remote.storage.enable = false, delete the topic's remote data.
        "remote.log.copy.disable": False,
        "remote.log.delete.on.disable": False,
        # KIP-1241 (Kafka 4.4): a rolled segment is copied once it is this old (by its
        # largest timestamp) or this many bytes behind the log end, either; 0 at once,
        # -1 the topic's local retention. Kafka's defaults: copied at once.
        "remote.copy.lag.ms": 0,
        "remote.copy.lag.bytes": -1,
        # KIP-956: one copy budget for the whole sidecar (Kafka's default: unlimited).
        "remote.log.manager.copy.max.bytes.per.second": (1 << 63) - 1,
        "remote.log.manager.copy.quota.window.num": 11,
        "remote.log.manager.copy.quota.window.size.seconds": 1,
        # How often leadership is asked of the cluster between rounds (ours, not Kafka's).
        "leadership.poll.ms": 5_000,
        # How often each topic's own configs are read again, to be kept in the store for
        # `rlmm restore` (ours; at once on first sight and when a tiering config changes).
        "topic.configs.refresh.ms": 300_000,
    },
}
OFFLOAD_TOPIC_SETTINGS = (
    "remote.storage.enable",
    "retention.ms",
    "retention.bytes",
    "local.retention.ms",
    "local.retention.bytes",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.copy.lag.ms",
    "remote.copy.lag.bytes",
)
# KIP-1241's settings take -1 (the local retention) but not -2, as in Kafka.
COPY_LAG_SETTINGS = ("remote.copy.lag.ms", "remote.copy.lag.bytes")
BOOLEAN_OFFLOAD_SETTINGS = (
    "remote.storage.enable",
    "verify.crc",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
)
_OPEN_SECTIONS = ("eventlog", "remote")
# Kafka client settings of the sidecar's cluster connection (leadership, topic configs)
# when the event log is not Kafka: [offload] "bootstrap.servers" and its security.
OFFLOAD_CLIENT_SETTINGS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.kerberos.service.name",
)
# [snapshot] keys without a default: dir (data_dir/snapshots), owner (broker-<broker_id>).
_SNAPSHOT_OPTIONAL = ("dir", "owner")
_KAFKA_PREFIX = "remote.log.metadata."
# Kafka's RLMM property names that map straight onto our event log settings.
_KAFKA_NAMES = {
    "remote.log.metadata.topic.num.partitions": "partitions",
    "remote.log.metadata.topic.replication.factor": "replication_factor",
    "remote.log.metadata.topic.retention.ms": "retention_ms",
    "remote.log.metadata.consume.wait.ms": "consume_wait_ms",
    "remote.log.metadata.common.client.bootstrap.servers": "bootstrap_servers",
    "remote.log.metadata.initialization.retry.max.timeout.ms": "init_timeout_ms",
    "remote.log.metadata.initialization.retry.interval.ms": "init_retry_backoff_ms",
}
# Where a Kafka property name may sit besides the top level: the prefix is dropped.
_KAFKA_PLACES = ("eventlog.properties.", "eventlog.")
# merged[_WRITTEN]: each event log setting given by a Kafka name -> that name (messages).
_WRITTEN = "_written_as"


@dataclass(frozen=True)
class RlmmConfig:
    """The whole configuration; sections are read-only mappings."""

    broker_id: int
    data_dir: Path
    manager: Mapping[str, Any]
    eventlog: Mapping[str, Any]
    snapshot: Mapping[str, Any]
    remote: Mapping[str, Any]
    kafka_properties: Mapping[str, str]
    source: str
    offload: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType(dict(DEFAULTS["offload"]))
    )
    broker_id_configured: bool = False  # set by a layer (file, environment, flag)
    archive: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType(dict(DEFAULTS["archive"]))
    )

    @property
    def event_log_type(self) -> str:
        """``eventlog.type``, its default filled in."""
        return str(self.eventlog.get("type", DEFAULTS["eventlog"]["type"]))

    def event_log_backend(self) -> type[EventLog]:
        """The configured event log's class: what callers ask what the log can do
        (``shared``, ``directory_option``, ``kafka_client``), never its type's name."""
        return backend(self.event_log_type)

    def event_log_options(self) -> dict[str, Any]:
        """Arguments for eventlog.load_event_log, with data_dir defaults filled in."""
        options = dict(self.eventlog)
        directory = self.event_log_backend().directory_option
        if directory is not None:
            options.setdefault(directory, str(self.data_dir / "metadata-log"))
        return options

    def remote_options(self) -> dict[str, Any]:
        """Arguments for remote.load_remote_storage_manager."""
        options = dict(self.remote)
        if options.get("type", "local") == "local":
            options.setdefault("root", str(self.data_dir / "remote"))
        return options

    def side_index_location(self) -> str | None:
        """The side index's directory (absolute) or ``s3://`` URL; None when it is off."""
        value = str(self.archive.get("side_index", "auto"))
        if value == "off":
            return None
        if value.startswith("s3://"):
            return value
        path = self.data_dir / "side-index" if value == "auto" else Path(value)
        return str(path.resolve())

    def snapshot_dir(self) -> Path:
        return Path(self.snapshot.get("dir", self.data_dir / "snapshots"))

    def snapshot_owner(self) -> str:
        """Who publishes this process's snapshots (and holds the metadata log back)."""
        return str(self.snapshot.get("owner", f"broker-{self.broker_id}"))


def parse_scalar(text: str) -> bool | int | float | str:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _kafka_name(key: str) -> str | None:
    """Kafka's property name in ``key`` (top level, under [eventlog] or under
    [eventlog.properties]), or None when ``key`` is not one."""
    for place in _KAFKA_PLACES:
        if key.startswith(place + _KAFKA_PREFIX):
            return key[len(place) :]
    return key if key.startswith(_KAFKA_PREFIX) else None


def _merge_layer(target: dict[str, Any], flat: Mapping[str, Any], origin: str) -> None:
    """Merge one layer (file, environment, command line) over ``target``.

    A Kafka name with an event log setting of its own is that setting, so the later
    layer wins whichever name each used; within one layer the two names of a setting
    must agree."""
    given: dict[str, tuple[str, Any]] = {}  # event log setting -> (key as written, value)
    for key, value in flat.items():
        kafka = _kafka_name(key)
        ours = _KAFKA_NAMES.get(kafka) if kafka is not None else None
        if kafka is not None and ours is None:
            target.setdefault("kafka_properties", {})[kafka] = str(value)
            continue
        if ours is not None:
            assert kafka is not None
            value = parse_scalar(str(value))
            target.setdefault(_WRITTEN, {})[ours] = kafka
            key = f"eventlog.{ours}"
        elif key.startswith("eventlog."):
            target.setdefault(_WRITTEN, {}).pop(key[len("eventlog.") :], None)
        if key.startswith("eventlog."):
            name = key[len("eventlog.") :]
            written = kafka or key
            if name in given and given[name][1] != value:
                first, first_value = given[name]
                raise ConfigError(
                    f"{first} = {first_value!r} and {written} = {value!r} are the same setting"
                    f" with two values (from {origin}): keep one"
                )
            given[name] = (written, value)
        _merge(target, key, value, origin)


def _merge(target: dict[str, Any], key: str, value: Any, origin: str) -> None:
    """Set ``section.key`` or a top-level key, rejecting unknown names."""
    section, _, name = key.partition(".")
    if section == "offload" and name:
        _merge_offload(target.setdefault("offload", {}), name, value, origin)
        return
    if not name:
        if section not in DEFAULTS or isinstance(DEFAULTS[section], dict):
            raise ConfigError(f"unknown setting {key!r} (from {origin})")
        target[section] = value
        return
    if section not in DEFAULTS or not isinstance(DEFAULTS[section], dict):
        raise ConfigError(f"unknown section {section!r} in setting {key!r} (from {origin})")
    if section not in _OPEN_SECTIONS:
        known = (*DEFAULTS[section], *(_SNAPSHOT_OPTIONAL if section == "snapshot" else ()))
        if name not in known:
            raise ConfigError(
                f"unknown setting {key!r} (from {origin}); known: {', '.join(sorted(known))}"
            )
    target.setdefault(section, {})[name] = value


def _merge_offload(target: dict[str, Any], name: str, value: Any, origin: str) -> None:
    """``offload.<kafka name>`` or ``offload.topics.<topic>.<kafka name>``.

    In environment variables ``_`` stands for ``.`` (``RLMM_OFFLOAD_RETENTION_MS``).
    """
    known = DEFAULTS["offload"]
    if name not in known and name.replace("_", ".") in known:
        name = name.replace("_", ".")
    if name in known:
        target[name] = value
        return
    if name in OFFLOAD_CLIENT_SETTINGS or name.startswith("ssl."):
        target.setdefault("cluster", {})[name] = str(value)
        return
    if name.startswith("topics."):
        # Longest first: "topics.t.local.retention.ms" is t's local.retention.ms, not
        # the retention.ms of a topic "t.local".
        for setting in sorted(OFFLOAD_TOPIC_SETTINGS, key=len, reverse=True):
            topic = name[len("topics.") : -len(setting) - 1]
            if name.endswith("." + setting) and topic:
                target.setdefault("topics", {}).setdefault(topic, {})[setting] = value
                return
        raise ConfigError(
            f"unknown setting 'offload.{name}' (from {origin}); known under"
            f" [offload.topics.<topic>]: {', '.join(sorted(OFFLOAD_TOPIC_SETTINGS))}"
        )
    known_here = [*sorted(known), *OFFLOAD_CLIENT_SETTINGS, "ssl.*"]
    raise ConfigError(
        f"unknown setting 'offload.{name}' (from {origin}); known: {', '.join(known_here)}"
        f" (per topic, under [offload.topics.<topic>]: {', '.join(OFFLOAD_TOPIC_SETTINGS)})"
    )


def _check_offload(offload: dict[str, Any]) -> None:
    """Types of the [offload] settings, per-topic overrides included (names the key)."""
    sections = [("offload", offload)] + [
        (f"offload.topics.{topic}", values) for topic, values in offload.get("topics", {}).items()
    ]
    for where, values in sections:
        for key, value in values.items():
            if key in ("topics", "cluster"):
                continue
            wants_bool = key in BOOLEAN_OFFLOAD_SETTINGS
            ok = (
                isinstance(value, bool)
                if wants_bool
                else (isinstance(value, int) and not isinstance(value, bool) and value >= -2)
            )
            if not ok:
                kind = "true or false" if wants_bool else "an integer (-1 unlimited, -2 inherit)"
                raise ConfigError(f"{where}.{key} must be {kind}, got {value!r}")
            if key in COPY_LAG_SETTINGS and value < -1:
                raise ConfigError(
                    f"{where}.{key} must be 0 (copy at once), positive, or -1 (the topic's"
                    f" local retention), got {value!r}"
                )
    for key in (
        "remote.log.manager.task.interval.ms",
        "remote.log.manager.copier.thread.pool.size",
        "leadership.poll.ms",
        "topic.configs.refresh.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.copy.quota.window.num",
        "remote.log.manager.copy.quota.window.size.seconds",
    ):
        if offload[key] <= 0:
            raise ConfigError(f"offload.{key} must be positive, got {offload[key]!r}")


def flatten_table(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A TOML table as dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            # [eventlog.properties] keeps its place (a Kafka name, quoted or dotted)
            out.update(flatten_table(value, f"{full}."))
        else:
            out[full] = value
    return out


# RLMM_* variables that are not settings (any other is one, or an error naming it): the
# file to read, switches of code paths, `rlmm serve`'s options (a broker's environment
# gives them) and the test suite's.
ENV_NOT_SETTINGS = frozenset(
    {
        "RLMM_CONFIG",
        "RLMM_NO_FAST_PATHS",
        "RLMM_NO_NATIVE_MEMORY_BOUND",
        "RLMM_SERVE_METRICS_PORT",
        "RLMM_SERVE_METRICS_HOST",
        "RLMM_KAFKA_BOOTSTRAP",
        "RLMM_APACHE_KAFKA",
        "RLMM_PROMETHEUS",
        "RLMM_TEST_CACHE",
        "RLMM_FUZZ_SECONDS",
    }
)


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith("RLMM_") or name in ENV_NOT_SETTINGS:
            continue
        rest = name[5:].lower()
        if rest in DEFAULTS and not isinstance(DEFAULTS[rest], dict):
            out[rest] = parse_scalar(raw)
            continue
        section, _, key = rest.partition("_")
        if section not in DEFAULTS or not key:
            raise ConfigError(f"unknown environment setting {name}")
        out[f"{section}.{key}"] = parse_scalar(raw)
    return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> RlmmConfig:
    """Build the configuration: overrides > RLMM_* env > TOML file > defaults."""
    env = os.environ if env is None else env
    # an empty RLMM_CONFIG (`RLMM_CONFIG= rlmm ...`) means no file, as in most tools
    path = path if path is not None else (env.get("RLMM_CONFIG") or None)
    merged: dict[str, Any] = copy.deepcopy(DEFAULTS)
    source = "defaults"
    layers: list[tuple[str, dict[str, Any]]] = []
    if path is not None:
        file = Path(path)
        try:
            with file.open("rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError as e:
            raise ConfigError(f"config file {file} does not exist") from e
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"config file {file} is not valid TOML: {e}") from e
        layers.append((str(file), flatten_table(data)))
        source = str(file)
    layers.append(("environment", _from_env(env)))
    layers.append(("command line", dict(overrides or {})))
    for origin, flat in layers:
        _merge_layer(merged, flat, origin)
    config = _validate(merged, source)
    if any("broker_id" in flat for _origin, flat in layers):
        config = replace(config, broker_id_configured=True)
    return config


def _validate(merged: dict[str, Any], source: str) -> RlmmConfig:
    kafka_properties: dict[str, str] = merged.pop("kafka_properties", {})
    written: dict[str, str] = merged.pop(_WRITTEN, {})
    eventlog = dict(merged["eventlog"])
    _check_eventlog(eventlog, written)
    if kafka_properties and backend(eventlog.get("type", "file")).kafka_client:
        eventlog["properties"] = dict(kafka_properties)
    elif kafka_properties:
        kinds = " or ".join(repr(k) for k in types_where(lambda c: c.kafka_client))
        raise ConfigError(
            f"Kafka settings {sorted(kafka_properties)} need an event log on a Kafka"
            f" cluster: eventlog.type = {kinds} (it is {eventlog.get('type', 'file')!r})"
        )
    _check_positive(eventlog, "partitions", "eventlog")
    manager = dict(merged["manager"])
    snapshot = dict(merged["snapshot"])
    for name in ("write_timeout_s", "ready_timeout_s"):
        _check_positive(manager, name, "manager")
    for name in ("every_events", "interval_s", "keep"):
        _check_positive(snapshot, name, "snapshot")
    if not isinstance(snapshot.get("enabled"), bool):
        enabled = snapshot.get("enabled")
        raise ConfigError(f"snapshot.enabled must be true or false, got {enabled!r}")
    if not isinstance(snapshot.get("retention"), bool):
        retention = snapshot.get("retention")
        raise ConfigError(f"snapshot.retention must be true or false, got {retention!r}")
    if snapshot.get("store") not in SNAPSHOT_STORE_TYPES:
        raise ConfigError(
            f"snapshot.store must be {_one_of(SNAPSHOT_STORE_TYPES)}, got {snapshot.get('store')!r}"
        )
    if snapshot["store"] == "s3" and merged["remote"].get("type") != "s3":
        raise ConfigError(
            "snapshot.store = 's3' uses the [remote] S3 bucket: it needs remote.type = 's3'"
            f" (it is {merged['remote'].get('type')!r})"
        )
    check_remote_options(merged["remote"])
    for name in ("every_events", "keep"):
        value = snapshot.get(name)
        if isinstance(value, float):
            raise ConfigError(f"snapshot.{name} must be a whole number, got {value!r}")
    offload = dict(merged["offload"])
    _check_offload(offload)
    archive = dict(merged["archive"])
    side_index = archive.get("side_index")
    if not isinstance(side_index, str) or not side_index or side_index == "s3://":
        raise ConfigError(
            "archive.side_index must be 'auto', 'off', a directory or 's3://bucket/prefix',"
            f" got {side_index!r}"
        )
    data_dir = merged["data_dir"]
    if not isinstance(data_dir, str | os.PathLike) or not str(data_dir):
        raise ConfigError(f"data_dir must be a directory path, got {data_dir!r}")
    broker_id = merged["broker_id"]
    if isinstance(broker_id, bool) or not isinstance(broker_id, int):
        raise ConfigError(f"broker_id must be an int, got {broker_id!r}")
    return RlmmConfig(
        broker_id=broker_id,
        data_dir=Path(data_dir),
        manager=MappingProxyType(manager),
        eventlog=MappingProxyType(eventlog),
        snapshot=MappingProxyType(snapshot),
        remote=MappingProxyType(dict(merged["remote"])),
        kafka_properties=MappingProxyType(kafka_properties),
        source=source,
        offload=MappingProxyType(offload),
        archive=MappingProxyType(archive),
    )


def _check_eventlog(eventlog: Mapping[str, Any], written: Mapping[str, str]) -> None:
    """ConfigError, one line naming the key and the known ones, for an ``[eventlog]``
    setting its type does not take (a typo, or another type's setting); a setting
    given by a Kafka property name is named as it was written."""
    kind = eventlog.get("type", "file")
    try:
        known = set(known_options(kind))
    except EventLogConfigError as e:  # an unknown type, or its backend cannot be loaded
        raise ConfigError(f"eventlog.type = {kind!r}: {e}") from e
    for key in sorted(set(eventlog) - known - {"type"}):
        name = written.get(key, f"eventlog.{key}")
        owners = [k for k in EVENT_LOG_TYPES if k != kind and key in known_options(k)]
        where = f" (a setting of eventlog.type = {owners[0]!r})" if owners else ""
        raise ConfigError(
            f"unknown setting {name} for eventlog.type = {kind!r}{where};"
            f" known: {', '.join(sorted(known))}"
        )


def _one_of(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


def _check_positive(section: Mapping[str, Any], name: str, where: str) -> None:
    value = section.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}.{name} must be a positive number, got {value!r}")
