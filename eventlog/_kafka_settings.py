"""KafkaLogSettings: every setting of a KafkaEventLog but its cluster and partition count.

Job: hold the ``kafka`` event log's settings, typed and with their defaults, and map the
flat ``[eventlog]`` keys of a configuration onto them (``from_options``). The security
of the connection is a nested ClientSecurity; the configuration's ``cafile``,
``certfile``, ``keyfile`` and ``key_password`` keys are read into its SSLContext.

Invariant: a KafkaLogSettings that exists is valid: a bad value is an EventLogConfigError
naming its key when it is built, never later at start. ``config_keys()`` are exactly the
keys ``from_options`` reads from a configuration (rlmm's config check and
docs/config.md list them through ``eventlog.registry.known_options``); any other key is
refused by name, never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from eventlog._kafka_config import ClientSecurity
from eventlog.errors import EventLogConfigError

DEFAULT_TOPIC = "__remote_log_metadata"
# RecordBatch attribute bits per producer compression.type (as aiokafka's producer).
COMPRESSION_ATTRS: dict[Any, int] = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Configuration keys naming PEM files (and the key's password): no field keeps them,
# they are read once into the security's SSLContext.
TLS_FILE_KEYS = ("cafile", "certfile", "keyfile", "key_password")
# ClientSecurity's fields that hold Python objects: given in code, no file can give them.
OBJECT_KEYS = frozenset({"ssl_context", "sasl_oauth_token_provider"})
# What the log's guarantees rest on (acks=all, no consumer group, reads from offset 0).
_FIXED_BY_THE_LOG = ("acks", "enable_auto_commit", "group_id", "auto_offset_reset")


@dataclass(frozen=True)
class KafkaLogSettings:
    """The topic, the clients' timings and security of one KafkaEventLog (Kafka's
    defaults); ``KafkaEventLog(bootstrap_servers, partitions, settings)``."""

    topic: str = DEFAULT_TOPIC
    replication_factor: int = 3
    retention_ms: int = -1
    create_topic: bool = True
    # Kafka's remote.log.metadata.consume.wait.ms: how long the manager waits for its
    # own write to come back through the log; kept here for the manager.
    consume_wait_ms: int = 120_000
    client_id: str = "rlmm-eventlog"
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    delivery_timeout_ms: int = 120_000
    init_timeout_ms: int = 30_000
    init_retry_backoff_ms: int = 100
    # A bootstrap that refuses every connection has no broker listening (down, or a
    # wrong address): retried this long when set (the sidecar sets it), not
    # init_timeout_ms, which is for a broker that accepts connections while it starts.
    # None: as long as anything else (a broker's own plugin process starts before the
    # broker listens, and retries its start anyway).
    refused_timeout_ms: int | None = None
    linger_ms: int = 5
    max_request_size: int = 1_048_576
    poll_timeout_ms: int = 500
    max_buffered_batches: int = 16
    # aiokafka's own producer and consumer arguments, over the ones above.
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    security: ClientSecurity = field(default_factory=ClientSecurity)

    def __post_init__(self) -> None:
        if self.replication_factor < 1:
            raise EventLogConfigError(
                f"replication_factor must be >= 1, got {self.replication_factor!r}"
            )
        if not self.topic:
            raise EventLogConfigError("topic must be a non-empty name")
        producer, consumer = dict(self.producer_config), dict(self.consumer_config)
        if producer.get("compression_type") not in COMPRESSION_ATTRS:
            raise EventLogConfigError(
                f"compression_type {producer['compression_type']!r} is not one of "
                "gzip, snappy, lz4, zstd"
            )
        for forbidden in _FIXED_BY_THE_LOG:
            if forbidden in producer or forbidden in consumer:
                raise EventLogConfigError(
                    f"{forbidden} is fixed by KafkaEventLog (acks=all, no consumer group)"
                )
        # Copies behind read-only views: the caller's dicts may change, these may not.
        object.__setattr__(self, "producer_config", MappingProxyType(producer))
        object.__setattr__(self, "consumer_config", MappingProxyType(consumer))

    @classmethod
    def config_keys(cls) -> dict[str, Any]:
        """Each key a configuration can give these settings, with its default (None
        where it has none): the fields but ``security``, those of ClientSecurity's
        fields that are not Python objects, and TLS_FILE_KEYS."""
        security = [f for f in dataclasses.fields(ClientSecurity) if f.name not in OBJECT_KEYS]
        own = [f for f in dataclasses.fields(cls) if f.name != "security"]
        # a mapping's default (an empty one) is "none given", as docs/config.md says
        keys = {f.name: None if f.default is dataclasses.MISSING else f.default for f in own}
        keys.update({f.name: f.default for f in security})
        return {**keys, **dict.fromkeys(TLS_FILE_KEYS)}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> KafkaLogSettings:
        """From flat keys: ``config_keys()`` and, given in code, ClientSecurity's object
        fields (``ssl_context``, ``sasl_oauth_token_provider``)."""
        own = {f.name for f in dataclasses.fields(cls)} - {"security"}
        security_fields = {f.name for f in dataclasses.fields(ClientSecurity)}
        unknown = sorted(set(options) - own - security_fields - set(TLS_FILE_KEYS))
        if unknown:
            raise EventLogConfigError(f"not a setting of the kafka event log: {unknown}")
        security = {k: v for k, v in options.items() if k in security_fields}
        files = {k: options.get(k) for k in TLS_FILE_KEYS}
        if security.get("ssl_context") is None and (files["cafile"] or files["certfile"]):
            from aiokafka.helpers import create_ssl_context

            security["ssl_context"] = create_ssl_context(
                cafile=files["cafile"],
                certfile=files["certfile"],
                keyfile=files["keyfile"],
                password=files["key_password"],
            )
        return cls(
            **{k: v for k, v in options.items() if k in own},
            security=ClientSecurity(**security),
        )


__all__ = ["DEFAULT_TOPIC", "KafkaLogSettings"]
