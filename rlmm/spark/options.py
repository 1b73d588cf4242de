"""The options of ``format("kafka-archive")``, parsed once on the driver into a typed value.

Names and meanings follow Spark's Kafka source (``subscribe``, ``subscribePattern``,
``assign``, ``startingOffsets`` / ``endingOffsets`` with their per-partition JSON and
-2 / -1, ``startingTimestamp`` / ``endingTimestamp``, ``startingOffsetsByTimestamp`` /
``endingOffsetsByTimestamp``, ``includeHeaders``, ``failOnDataLoss``, ``minPartitions``,
``maxRecordsPerPartition``); ours are ``isolationLevel``, ``maxBytesPerPartition``
and ``openCostInBytes`` (how slices are cut and grouped into input partitions),
``filterPushdown`` (whether pushed filters prune), ``fromStore`` (the segment list
from the remote store alone, for when the metadata log is lost), ``config`` (the rlmm
TOML) and ``rlmm.<section>.<key>`` overrides of it. The same settings may come from the Spark conf
as ``spark.rlmm.<section>.<key>`` (read by ``rlmm.spark.register``); a setting's
precedence is option > Spark conf > config file. Options only meaningful to a live consumer
(``kafka.*``, streaming rate limits) are accepted and ignored, so switching
``format("kafka")`` to ``format("kafka-archive")`` is one word.

Invariant: ``parse_options`` either returns a valid, picklable ``KafkaArchiveOptions``
or raises ``KafkaArchiveOptionError`` naming the option as the caller spelled it (Spark
hands a data source its option names lower-cased: a known option is then named in
Spark's spelling; an unknown one as it came, with the close match when there is one);
no message points at a file of the repository; it imports neither pyspark nor
pyarrow. Timestamp precedence is Spark's: ``*Timestamp`` over ``*OffsetsByTimestamp``
over ``*Offsets``. Secret settings (by name, ``rlmm.secrets.is_secret``) are held
apart: ``KafkaArchiveOptions.split_secrets`` gives the value that may travel to
executors and the secrets that stay on the driver.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlmm.spark.errors import KafkaArchiveOptionError

EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
OVERRIDE_PREFIX = "rlmm."
CONF_PREFIX = "spark.rlmm."
"""Spark conf keys ``spark.rlmm.<section>.<key>`` are rlmm settings, below the options."""
PartitionKey = tuple[str, int]

# Spark's spelling of every option we read (keys arrive lower-cased from Spark).
_OURS = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "includeHeaders",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "isolationLevel",
    "maxBytesPerPartition",
    "openCostInBytes",
    "filterPushdown",
    "fromStore",
    "config",
)
SPELLING = {name.lower(): name for name in _OURS}
# Spark Kafka-source options that only concern a live consumer or a stream.
IGNORED = frozenset(
    name.lower()
    for name in (
        "groupIdPrefix",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
    )
)
KAFKA_ISOLATION_LEVEL = "kafka.isolation.level"
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024


@dataclass(frozen=True)
class KafkaArchiveOptions:
    """One read's options, validated; a small picklable value (driver side only)."""

    config_path: str | None
    config_overrides: Mapping[str, Any]  # rlmm.<section>.<key> options
    # spark.rlmm.<section>.<key> Spark conf entries (the options win over them)
    conf_overrides: Mapping[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] | None = None
    starting_offsets: Mapping[PartitionKey, int] | None = None
    ending_offsets: Mapping[PartitionKey, int] | None = None
    starting_timestamp_ms: int | Mapping[PartitionKey, int] | None = None
    ending_timestamp_ms: int | Mapping[PartitionKey, int] | None = None
    starting_timestamp_strategy: str = "error"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    isolation_level: str = READ_UNCOMMITTED
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    open_cost_in_bytes: int | None = None  # None: rlmm.archive.packing's default
    # None: "auto", on only where Spark keeps a scan's pushdown to that scan (see
    # rlmm.spark.source.pushdown_is_scan_scoped).
    filter_pushdown: bool | None = None
    # True: the segment list from the remote store alone (no metadata log)
    from_store: bool = False
    ignored: tuple[str, ...] = field(default=())

    @property
    def subscription(self) -> str:
        """The option that chose the partitions (for messages)."""
        if self.assign is not None:
            return "assign"
        return "subscribePattern" if self.pattern is not None else "subscribe"

    def requested_topics(self) -> tuple[str, ...]:
        """Topics named explicitly (subscribe or assign); empty for a pattern."""
        if self.assign is not None:
            return tuple(self.assign)
        return self.topics

    def settings(self) -> dict[str, Any]:
        """The rlmm settings over the config file: Spark conf, then options over it."""
        return {**self.conf_overrides, **self.config_overrides}

    def setting_name(self, key: str) -> str:
        """Where setting ``key`` was given: its option, or its Spark conf key."""
        if key in self.config_overrides or key not in self.conf_overrides:
            return f"{OVERRIDE_PREFIX}{key}"
        return f"{CONF_PREFIX}{key}"

    def split_secrets(self) -> tuple[KafkaArchiveOptions, dict[str, Any]]:
        """(these options without their secret settings, those settings): what may be
        pickled for executors, and what only the driver's planning may use."""
        from rlmm.secrets import is_secret

        secrets = {k: v for k, v in self.settings().items() if is_secret(k)}
        public = replace(
            self,
            config_overrides={k: v for k, v in self.config_overrides.items() if k not in secrets},
            conf_overrides={k: v for k, v in self.conf_overrides.items() if k not in secrets},
        )
        return public, secrets

    def with_secrets(self, secrets: Mapping[str, Any]) -> KafkaArchiveOptions:
        """These options with ``secrets`` (from ``split_secrets``) back, as options."""
        if not secrets:
            return self
        return replace(self, config_overrides={**self.config_overrides, **secrets})

    def offset_keys(self) -> list[tuple[str, PartitionKey]]:
        """(option, (topic, partition)) of every partition named in an offsets option."""
        out: list[tuple[str, PartitionKey]] = []
        for option, value in (
            ("startingOffsets", self.starting_offsets),
            ("endingOffsets", self.ending_offsets),
            ("startingOffsetsByTimestamp", self.starting_timestamp_ms),
            ("endingOffsetsByTimestamp", self.ending_timestamp_ms),
        ):
            if isinstance(value, Mapping):
                out.extend((option, key) for key in value)
        return out


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise KafkaArchiveOptionError(name, f"must be true or false, got {raw!r}")
    return text == "true"


def _auto_bool(options: Mapping[str, str], name: str) -> bool | None:
    """``true`` / ``false``, or None for ``auto`` (and unset)."""
    raw = options.get(name.lower())
    if raw is None or str(raw).strip().lower() == "auto":
        return None
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise KafkaArchiveOptionError(name, f"must be auto, true or false, got {raw!r}")
    return text == "true"


def _int_at_least(options: Mapping[str, str], name: str, minimum: int, what: str) -> int | None:
    """The integer option ``name`` (None if unset); ``what`` words the error."""
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise KafkaArchiveOptionError(name, f"must be {what}, got {raw!r}") from None
    if value < minimum:
        raise KafkaArchiveOptionError(name, f"must be {what}, got {raw!r}")
    return value


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    return _int_at_least(options, name, 1, "a positive integer")


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise KafkaArchiveOptionError(name, f"is not valid JSON ({e}): {raw!r}") from None


def _partition(name: str, topic: str, text: Any) -> int:
    try:
        partition = int(text)
    except (TypeError, ValueError):
        partition = -1
    if partition < 0 or isinstance(text, bool | float):
        raise KafkaArchiveOptionError(
            name, f"{text!r} of topic {topic!r} is not a partition number"
        )
    return partition


def _per_partition(name: str, raw: str) -> dict[PartitionKey, int]:
    """Spark's per-partition JSON: ``{"topicA": {"0": 23, "1": -2}, ...}``."""
    data = _json(name, raw)
    if not isinstance(data, dict) or not data:
        raise KafkaArchiveOptionError(
            name, f'must be a JSON object like {{"topic": {{"0": 23}}}}, got {raw!r}'
        )
    out: dict[PartitionKey, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict) or not partitions:
            raise KafkaArchiveOptionError(
                name, f"topic {topic!r} must map partitions to numbers, got {partitions!r}"
            )
        for p, value in partitions.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaArchiveOptionError(name, f"{topic}-{p}: {value!r} is not an integer")
            out[(topic, _partition(name, topic, p))] = value
    return out


def _offsets(
    options: Mapping[str, str], name: str, *, start: bool
) -> dict[PartitionKey, int] | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    if text.lower() == "earliest":
        if not start:
            raise KafkaArchiveOptionError(name, "earliest is not allowed as an ending offset")
        return None
    if text.lower() == "latest":
        if start:
            raise KafkaArchiveOptionError(
                name, "latest is not allowed as a starting offset in a batch read"
            )
        return None
    offsets = _per_partition(name, text)
    for (topic, p), value in offsets.items():
        bad = value == LATEST or value < EARLIEST if start else value == EARLIEST or value < LATEST
        if bad:
            allowed = (
                "an offset >= 0 or -2 (earliest)" if start else "an offset >= 0 or -1 (latest)"
            )
            raise KafkaArchiveOptionError(
                name, f"{topic}-{p}: {value} is not allowed; use {allowed}"
            )
    return offsets


def _timestamp(options: Mapping[str, str], name: str) -> int | None:
    return _int_at_least(options, name, 0, "a timestamp in ms >= 0")


def _by_timestamp(options: Mapping[str, str], name: str) -> dict[PartitionKey, int] | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    out = _per_partition(name, str(raw))
    for (topic, p), value in out.items():
        if value < 0:
            raise KafkaArchiveOptionError(name, f"{topic}-{p}: {value} is not a timestamp in ms")
    return out


def _bound(
    options: Mapping[str, str], prefix: str
) -> tuple[int | dict[PartitionKey, int] | None, dict[PartitionKey, int] | None]:
    """(timestamp, offsets) of the ``starting`` or ``ending`` bound; Spark's precedence:
    ``*Timestamp`` > ``*OffsetsByTimestamp`` > ``*Offsets`` (all are validated)."""
    ts: int | dict[PartitionKey, int] | None = _timestamp(options, f"{prefix}Timestamp")
    by_ts = _by_timestamp(options, f"{prefix}OffsetsByTimestamp")
    offsets = _offsets(options, f"{prefix}Offsets", start=prefix == "starting")
    if ts is None:
        ts = by_ts
    return ts, None if ts is not None else offsets


def _subscription(options: Mapping[str, str]) -> dict[str, Any]:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in options]
    if len(given) != 1:
        raise KafkaArchiveOptionError(
            given[1] if len(given) > 1 else "subscribe",
            "exactly one of subscribe, subscribePattern or assign must be given"
            + (f" (got {', '.join(given)})" if given else ""),
        )
    name = given[0]
    raw = str(options[name.lower()]).strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise KafkaArchiveOptionError(name, f"names no topic: {raw!r}")
        return {"topics": topics}
    if name == "subscribePattern":
        if not raw:
            raise KafkaArchiveOptionError(name, "is empty")
        try:
            re.compile(raw)
        except re.error as e:
            raise KafkaArchiveOptionError(name, f"is not a valid regex ({e}): {raw!r}") from None
        return {"pattern": raw}
    data = _json(name, raw)
    if not isinstance(data, dict) or not data:
        raise KafkaArchiveOptionError(
            name, f'must be a JSON object like {{"topicA": [0, 1]}}, got {raw!r}'
        )
    assign: dict[str, tuple[int, ...]] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not partitions:
            raise KafkaArchiveOptionError(
                name, f"topic {topic!r} must map to a list of partitions, got {partitions!r}"
            )
        assign[topic] = tuple(sorted({_partition(name, topic, p) for p in partitions}))
    return {"assign": assign}


def _overrides(options: Mapping[str, str], prefix: str = OVERRIDE_PREFIX) -> dict[str, Any]:
    """The rlmm settings among ``options`` (keys ``<prefix><section>.<key>``)."""
    from rlmm.config import parse_scalar

    return {
        key[len(prefix) :]: parse_scalar(str(value))
        for key, value in options.items()
        if key.startswith(prefix) and len(key) > len(prefix)
    }


def conf_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """The ``spark.rlmm.*`` entries of a Spark conf (as given, prefix kept)."""
    return {str(k): str(v) for k, v in conf.items() if str(k).startswith(CONF_PREFIX)}


def _unknown_option(key: str) -> str:
    """Why ``key`` (lower-cased) is refused: the close match, or the options there are."""
    close = difflib.get_close_matches(key, list(SPELLING), n=1, cutoff=0.8)
    if close:
        return f"is not an option of kafka-archive; did you mean {SPELLING[close[0]]}?"
    return (
        f"is not an option of kafka-archive (its options: {', '.join(_OURS)}, and"
        f" {OVERRIDE_PREFIX}<section>.<key> settings; Spark's kafka.* options are ignored)"
    )


def parse_options(
    options: Mapping[str, str], conf: Mapping[str, str] | None = None
) -> KafkaArchiveOptions:
    """Validate Spark's options (its names are case-insensitive, and Spark passes them
    lower-cased); raise KafkaArchiveOptionError naming one. ``conf``: the session's
    ``spark.rlmm.*`` Spark conf entries (``conf_settings``), below the options."""
    spelled = {str(k).lower(): str(k) for k in options}  # the caller's spelling
    options = {str(k).lower(): v for k, v in options.items()}
    ignored = []
    for key in options:
        if key in SPELLING or key.startswith(OVERRIDE_PREFIX) or key == KAFKA_ISOLATION_LEVEL:
            continue
        if key in IGNORED or key.startswith("kafka."):
            ignored.append(key)
            continue
        raise KafkaArchiveOptionError(spelled[key], _unknown_option(key))
    config_path = options.get("config")
    overrides = _overrides(options)
    from_conf = _overrides(conf or {}, CONF_PREFIX)
    if config_path is not None:
        path = Path(str(config_path)).expanduser()
        if not path.is_file():
            raise KafkaArchiveOptionError("config", f"file {str(config_path)!r} does not exist")
        config_path = str(path.resolve())
    elif not overrides and not from_conf:
        raise KafkaArchiveOptionError(
            "config",
            "is required: the path of the rlmm TOML (or rlmm.<section>.<key> settings, or"
            f" {CONF_PREFIX}<section>.<key> in the Spark conf)",
        )
    if "isolationlevel" in options and KAFKA_ISOLATION_LEVEL in options:
        raise KafkaArchiveOptionError(
            "isolationLevel", f"give isolationLevel or {KAFKA_ISOLATION_LEVEL}, not both"
        )
    level_name = "isolationLevel" if "isolationlevel" in options else KAFKA_ISOLATION_LEVEL
    level = str(options.get(level_name.lower(), READ_UNCOMMITTED)).strip().lower()
    if level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise KafkaArchiveOptionError(
            level_name, f"must be {READ_UNCOMMITTED} or {READ_COMMITTED}, got {level!r}"
        )
    strategy_name = "startingOffsetsByTimestampStrategy"
    strategy = str(options.get(strategy_name.lower(), "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaArchiveOptionError(strategy_name, f"must be error or latest, got {strategy!r}")
    starting_ts, starting_offsets = _bound(options, "starting")
    ending_ts, ending_offsets = _bound(options, "ending")
    parsed = KafkaArchiveOptions(
        config_path=config_path,
        config_overrides=overrides,
        conf_overrides=from_conf,
        starting_offsets=starting_offsets,
        ending_offsets=ending_offsets,
        starting_timestamp_ms=starting_ts,
        ending_timestamp_ms=ending_ts,
        starting_timestamp_strategy=strategy,
        include_headers=_bool(options, "includeHeaders", False),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        min_partitions=_positive_int(options, "minPartitions"),
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition"),
        isolation_level=level,
        max_bytes_per_partition=_positive_int(options, "maxBytesPerPartition")
        or DEFAULT_MAX_BYTES_PER_PARTITION,
        open_cost_in_bytes=_int_at_least(options, "openCostInBytes", 0, "a non-negative integer"),
        filter_pushdown=_auto_bool(options, "filterPushdown"),
        from_store=_bool(options, "fromStore", False),
        ignored=tuple(sorted(ignored)),
        **_subscription(options),
    )
    _check_offsets_in_subscription(parsed)
    return parsed


def _check_offsets_in_subscription(parsed: KafkaArchiveOptions) -> None:
    """Per-partition offsets must name subscribed partitions (Spark's rule)."""
    for option, (topic, partition) in parsed.offset_keys():
        if parsed.assign is not None:
            ok = partition in parsed.assign.get(topic, ())
        elif parsed.pattern is not None:
            ok = re.fullmatch(parsed.pattern, topic) is not None
        else:
            ok = topic in parsed.topics
        if not ok:
            raise KafkaArchiveOptionError(
                option, f"names {topic}-{partition}, which {parsed.subscription} does not select"
            )


__all__ = [
    "CONF_PREFIX",
    "EARLIEST",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "KafkaArchiveOptions",
    "conf_settings",
    "parse_options",
]
