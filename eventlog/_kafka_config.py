"""Settings of KafkaEventLog: the frozen option object and Kafka property-name mapping.

Job: turn Kafka's own RLMM property names (``remote.log.metadata.*``, with the
``common.client.`` / ``producer.`` / ``consumer.`` prefixes) and the constructor's
keyword arguments into aiokafka keyword arguments.

Invariant: every accepted property maps to a real aiokafka setting or to one of
ours; a property we cannot honour raises EventLogConfigError naming it, so a
setting is never silently dropped.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eventlog.errors import EventLogConfigError

PREFIX = "remote.log.metadata."
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_MECHANISMS = ("PLAIN", "GSSAPI", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class ClientSecurity:
    """Connection options shared by the producer, consumer and admin clients."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None
    sasl_kerberos_service_name: str = "kafka"
    sasl_kerberos_domain_name: str | None = None
    sasl_oauth_token_provider: Any = None

    def __post_init__(self) -> None:
        if self.security_protocol not in _SECURITY_PROTOCOLS:
            raise EventLogConfigError(
                f"security.protocol {self.security_protocol!r} is not one of {_SECURITY_PROTOCOLS}"
            )
        if self.sasl_mechanism not in _SASL_MECHANISMS:
            raise EventLogConfigError(
                f"sasl.mechanism {self.sasl_mechanism!r} is not one of {_SASL_MECHANISMS}"
            )
        if (
            self.security_protocol.startswith("SASL")
            and self.sasl_mechanism
            in (
                "PLAIN",
                "SCRAM-SHA-256",
                "SCRAM-SHA-512",
            )
            and (self.sasl_plain_username is None or self.sasl_plain_password is None)
        ):
            raise EventLogConfigError(
                f"sasl.mechanism {self.sasl_mechanism} needs a username and a password "
                "(sasl_plain_username / sasl_plain_password or sasl.jaas.config)"
            )

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments understood by every aiokafka client class."""
        return {
            "security_protocol": self.security_protocol,
            "ssl_context": self.ssl_context,
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_plain_username": self.sasl_plain_username,
            "sasl_plain_password": self.sasl_plain_password,
            "sasl_kerberos_service_name": self.sasl_kerberos_service_name,
            "sasl_kerberos_domain_name": self.sasl_kerberos_domain_name,
            "sasl_oauth_token_provider": self.sasl_oauth_token_provider,
        }


@dataclass(frozen=True)
class _PropSpec:
    """How one Kafka client property maps to an aiokafka keyword argument."""

    kwarg: str
    kind: type = int


# Kafka client properties valid for every client (common.client.* and both prefixes).
_COMMON_PROPS: dict[str, _PropSpec] = {
    "client.id": _PropSpec("client_id", str),
    "request.timeout.ms": _PropSpec("request_timeout_ms"),
    "retry.backoff.ms": _PropSpec("retry_backoff_ms"),
    "metadata.max.age.ms": _PropSpec("metadata_max_age_ms"),
    "connections.max.idle.ms": _PropSpec("connections_max_idle_ms"),
}
# Common properties that are KafkaEventLog arguments (the rest go to both clients).
_LOG_CLIENT_KWARGS = ("client_id", "request_timeout_ms", "retry_backoff_ms")
# Producer-only properties (remote.log.metadata.producer.*).
_PRODUCER_PROPS: dict[str, _PropSpec] = {
    "linger.ms": _PropSpec("linger_ms"),
    "batch.size": _PropSpec("max_batch_size"),
    "max.request.size": _PropSpec("max_request_size"),
    "compression.type": _PropSpec("compression_type", str),
}
# Consumer-only properties (remote.log.metadata.consumer.*).
_CONSUMER_PROPS: dict[str, _PropSpec] = {
    "fetch.max.wait.ms": _PropSpec("fetch_max_wait_ms"),
    "fetch.min.bytes": _PropSpec("fetch_min_bytes"),
    "fetch.max.bytes": _PropSpec("fetch_max_bytes"),
    "max.partition.fetch.bytes": _PropSpec("max_partition_fetch_bytes"),
    "check.crcs": _PropSpec("check_crcs", bool),
    "isolation.level": _PropSpec("isolation_level", str),
    "client.rack": _PropSpec("client_rack", str),
}
# Properties Kafka's RLMM fixes itself (bytes serde, no group, acks=all): accepted
# only with the value the RLMM would use anyway, so a conflicting one is refused.
_FIXED_VALUES: dict[str, tuple[str, ...]] = {
    "acks": ("all", "-1"),
    "enable.idempotence": ("false",),
    "enable.auto.commit": ("false",),
    "key.serializer": ("org.apache.kafka.common.serialization.ByteArraySerializer",),
    "value.serializer": ("org.apache.kafka.common.serialization.ByteArraySerializer",),
    "key.deserializer": ("org.apache.kafka.common.serialization.ByteArrayDeserializer",),
    "value.deserializer": ("org.apache.kafka.common.serialization.ByteArrayDeserializer",),
    "auto.offset.reset": ("earliest",),
}
# Our own top-level properties -> KafkaEventLog keyword argument.
_LOG_PROPS: dict[str, _PropSpec] = {
    "topic.num.partitions": _PropSpec("partitions"),
    "topic.replication.factor": _PropSpec("replication_factor"),
    "topic.retention.ms": _PropSpec("retention_ms"),
    "consume.wait.ms": _PropSpec("consume_wait_ms"),
    "initialization.retry.max.timeout.ms": _PropSpec("init_timeout_ms"),
    "initialization.retry.interval.ms": _PropSpec("init_retry_backoff_ms"),
    "topic.name": _PropSpec("topic", str),
}

_JAAS = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)\"""")


def _convert(name: str, raw: str, kind: type) -> Any:
    text = raw.strip()
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise EventLogConfigError(f"{name} must be an integer, got {raw!r}") from None
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise EventLogConfigError(f"{name} must be true or false, got {raw!r}")
        return text.lower() == "true"
    return text


def parse_jaas_config(name: str, value: str) -> tuple[str, str]:
    """Username and password of a PlainLoginModule / ScramLoginModule JAAS line."""
    if "PlainLoginModule" not in value and "ScramLoginModule" not in value:
        raise EventLogConfigError(
            f"{name}: only PlainLoginModule and ScramLoginModule are supported, got {value!r}"
        )
    options = {k: v.replace('\\"', '"') for k, v in _JAAS.findall(value)}
    if "username" not in options or "password" not in options:
        raise EventLogConfigError(f'{name} has no username="..." password="..." options')
    return options["username"], options["password"]


class _SslSettings:
    """Collects Kafka's ssl.* properties, then builds one SSLContext."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def build(self) -> ssl.SSLContext | None:
        if not self.values:
            return None
        v = self.values
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = v.get(key, "PEM").upper()
            if kind != "PEM":
                # JKS / PKCS12 stores are Java formats Python's ssl module cannot load.
                raise EventLogConfigError(
                    f"{PREFIX}common.client.{key}={kind} is not supported: convert the store "
                    "to PEM files (ssl.truststore.location / ssl.keystore.location)"
                )
        ctx = ssl.create_default_context(
            cafile=v.get("ssl.truststore.location"),
            cadata=v.get("ssl.truststore.certificates"),
        )
        if "ssl.keystore.location" in v:
            # A PEM keystore holds the certificate chain and the private key.
            ctx.load_cert_chain(
                v["ssl.keystore.location"], password=v.get("ssl.key.password") or None
            )
        if v.get("ssl.endpoint.identification.algorithm", "https") == "":
            ctx.check_hostname = False
        return ctx


_SSL_KEYS = (
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.certificates",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)


@dataclass
class KafkaProperties:
    """Result of mapping a Kafka property set: KafkaEventLog keyword arguments."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    producer_config: dict[str, Any] = field(default_factory=dict)
    consumer_config: dict[str, Any] = field(default_factory=dict)


def map_properties(props: Mapping[str, str]) -> KafkaProperties:
    """Map Kafka's ``remote.log.metadata.*`` properties to KafkaEventLog arguments.

    Properties without the ``remote.log.metadata.`` prefix are ignored (a broker's
    whole config may be passed); an unknown one under the prefix is an error.
    """
    out = KafkaProperties()
    ssl_settings = _SslSettings()
    security: dict[str, Any] = {}
    for name, raw in props.items():
        if not name.startswith(PREFIX):
            continue
        if not isinstance(raw, str):
            raise EventLogConfigError(f"{name} must be a string value, got {raw!r}")
        rest = name[len(PREFIX) :]
        if rest in _LOG_PROPS:
            spec = _LOG_PROPS[rest]
            out.kwargs[spec.kwarg] = _convert(name, raw, spec.kind)
            continue
        for scope, target in (
            ("common.client.", None),
            ("producer.", out.producer_config),
            ("consumer.", out.consumer_config),
        ):
            if rest.startswith(scope):
                _map_client_prop(
                    name, rest[len(scope) :], raw, scope, target, out, ssl_settings, security
                )
                break
        else:
            raise EventLogConfigError(f"unsupported property {name}")
    if "bootstrap_servers" not in out.kwargs:
        raise EventLogConfigError(f"{PREFIX}common.client.bootstrap.servers is required")
    ssl_context = ssl_settings.build()
    if ssl_context is not None:
        out.kwargs["ssl_context"] = ssl_context
    out.kwargs.update(security)
    return out


def _map_client_prop(
    name: str,
    prop: str,
    raw: str,
    scope: str,
    target: dict[str, Any] | None,
    out: KafkaProperties,
    ssl_settings: _SslSettings,
    security: dict[str, Any],
) -> None:
    """Map one client property (``prop`` without its prefix) into ``out``."""
    if prop in _FIXED_VALUES:
        if raw.strip().lower() not in _FIXED_VALUES[prop]:
            raise EventLogConfigError(
                f"{name}={raw!r} is not supported: the metadata log requires "
                f"{_FIXED_VALUES[prop][0]!r}"
            )
        return
    if scope != "common.client.":
        # Connection-level settings differ per client only in Java; aiokafka shares them.
        per_client = _PRODUCER_PROPS if scope == "producer." else _CONSUMER_PROPS
        if prop in per_client:
            spec = per_client[prop]
            assert target is not None
            target[spec.kwarg] = _convert(name, raw, spec.kind)
            return
        if prop in _COMMON_PROPS:
            spec = _COMMON_PROPS[prop]
            assert target is not None
            target[spec.kwarg] = _convert(name, raw, spec.kind)
            return
        if scope == "producer." and prop == "delivery.timeout.ms":
            out.kwargs["delivery_timeout_ms"] = _convert(name, raw, int)
            return
        raise EventLogConfigError(f"unsupported property {name}")
    if prop == "bootstrap.servers":
        out.kwargs["bootstrap_servers"] = raw.strip()
    elif prop == "security.protocol":
        security["security_protocol"] = raw.strip().upper()
    elif prop == "sasl.mechanism":
        security["sasl_mechanism"] = raw.strip().upper()
    elif prop == "sasl.jaas.config":
        user, password = parse_jaas_config(name, raw)
        security["sasl_plain_username"] = user
        security["sasl_plain_password"] = password
    elif prop == "sasl.kerberos.service.name":
        security["sasl_kerberos_service_name"] = raw.strip()
    elif prop in _SSL_KEYS:
        ssl_settings.values[prop] = raw.strip()
    elif prop in _COMMON_PROPS:
        spec = _COMMON_PROPS[prop]
        value = _convert(name, raw, spec.kind)
        if spec.kwarg in _LOG_CLIENT_KWARGS:
            out.kwargs[spec.kwarg] = value
        else:
            out.producer_config.setdefault(spec.kwarg, value)
            out.consumer_config.setdefault(spec.kwarg, value)
    else:
        raise EventLogConfigError(f"unsupported property {name}")
