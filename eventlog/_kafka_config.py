"""Settings of KafkaEventLog: the frozen option object and Kafka property-name mapping.

Job: turn Kafka's own RLMM property names (``remote.log.metadata.*``, with the
``common.client.`` / ``producer.`` / ``consumer.`` prefixes) and the constructor's
keyword arguments into aiokafka keyword arguments.

Invariant: every accepted property maps to a real aiokafka setting or to one of
ours; a property we cannot honour raises EventLogConfigError naming it, so a
setting is never silently dropped.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
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
    client_certificate_subject: str | None = None

    @property
    def principal(self) -> str:
        """Who the broker sees, for messages (a password never appears here)."""
        if self.security_protocol.startswith("SASL"):
            if self.sasl_plain_username is not None:
                return f"User:{self.sasl_plain_username}"
            return f"the SASL/{self.sasl_mechanism} principal"
        if self.security_protocol == "SSL" and self.client_certificate_subject is not None:
            return f"User:{self.client_certificate_subject}"
        if self.security_protocol == "SSL" and self.ssl_context is not None:
            return "the client certificate's principal"
        return "User:ANONYMOUS"

    def __repr__(self) -> str:
        # the dataclass repr would print the password
        return f"ClientSecurity({self.security_protocol}, {self.principal})"

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
    """Collects Kafka's ssl.* properties, then builds one SSLContext.

    Stores may be PEM files, PEM text inline (``ssl.truststore.certificates``,
    ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``) or PKCS12 files
    (read with the ``cryptography`` package). Python's ssl module loads a client key
    only from a file, so a PKCS12 or inline key passes through a private temp file
    that is deleted as soon as the context holds it.
    """

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.client_subject: str | None = None

    def build(self) -> ssl.SSLContext | None:
        if not self.values:
            return None
        v = self.values
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = v.get(key, "PEM").upper()
            if kind not in ("PEM", "PKCS12"):
                # JKS is a Java-only format: no well-kept Python library reads it.
                raise EventLogConfigError(
                    f"{PREFIX}common.client.{key}={kind} is not supported: convert the store"
                    " to PKCS12 (keytool -importkeystore -deststoretype PKCS12) or PEM"
                )
        try:
            ctx = ssl.create_default_context(cadata=self._trusted())
        except ssl.SSLError as e:
            where = self.values.get("ssl.truststore.location", "ssl.truststore.certificates")
            raise EventLogConfigError(
                f"{where}: no CA certificate could be read from it ({e.reason or e})"
            ) from None
        chain = self._client_chain()
        if chain is not None:
            self.client_subject = _subject(chain)
            with tempfile.TemporaryDirectory(prefix="rlmm-tls-") as tmp:
                path = Path(tmp) / "client.pem"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(chain)
                # a PKCS12 key is written out unencrypted; a PEM one may be encrypted
                pkcs12_store = v.get("ssl.keystore.type", "PEM").upper() == "PKCS12"
                password = None if pkcs12_store else v.get("ssl.key.password") or None
                try:
                    ctx.load_cert_chain(path, password=password)
                except ssl.SSLError as e:
                    raise EventLogConfigError(
                        f"{self._keystore_name()}: cannot load the client certificate and key"
                        f" ({e.reason or e}); check ssl.key.password"
                    ) from None
        if v.get("ssl.endpoint.identification.algorithm", "https") == "":
            ctx.check_hostname = False
        return ctx

    def _keystore_name(self) -> str:
        return self.values.get("ssl.keystore.location", f"{PREFIX}common.client.ssl.keystore.*")

    def _trusted(self) -> str | None:
        """The CA certificates as PEM text (None: the system's CAs)."""
        v = self.values
        if "ssl.truststore.certificates" in v:
            return v["ssl.truststore.certificates"]
        location = v.get("ssl.truststore.location")
        if location is None:
            return None
        data = _read_store(location, "ssl.truststore.location")
        if v.get("ssl.truststore.type", "PEM").upper() == "PKCS12":
            _key, cert, extra = _load_pkcs12(
                data, v.get("ssl.truststore.password"), "ssl.truststore.location", location
            )
            data = b"".join(_pem(c) for c in [cert, *extra] if c is not None)
        return data.decode("ascii", errors="replace")

    def _client_chain(self) -> bytes | None:
        """The client's key and certificate chain as one PEM blob, or None."""
        v = self.values
        if "ssl.keystore.key" in v or "ssl.keystore.certificate.chain" in v:
            if "ssl.keystore.key" not in v or "ssl.keystore.certificate.chain" not in v:
                raise EventLogConfigError(
                    f"{PREFIX}common.client.ssl.keystore.key and .certificate.chain go together"
                )
            return (
                v["ssl.keystore.key"].strip() + "\n" + v["ssl.keystore.certificate.chain"]
            ).encode()
        location = v.get("ssl.keystore.location")
        if location is None:
            return None
        data = _read_store(location, "ssl.keystore.location")
        if v.get("ssl.keystore.type", "PEM").upper() != "PKCS12":
            return data
        key, cert, extra = _load_pkcs12(
            data, v.get("ssl.keystore.password"), "ssl.keystore.location", location
        )
        if key is None or cert is None:
            raise EventLogConfigError(
                f"ssl.keystore.location {location}: no key and certificate in it"
            )
        from cryptography.hazmat.primitives import serialization

        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return key_pem + b"".join(_pem(c) for c in [cert, *extra])


def _read_store(location: str, name: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise EventLogConfigError(f"{name} {location}: {e.strerror or e}") from None


def _load_pkcs12(
    data: bytes, password: str | None, name: str, location: str
) -> tuple[Any, Any, list[Any]]:
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise EventLogConfigError(
            f"{name} {location} is PKCS12: reading it needs the cryptography package"
            " (pip install 'rlmm[encryption]')"
        ) from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None
        )
    except ValueError:
        # never the password itself in the message
        raise EventLogConfigError(
            f"{name} {location}: not a PKCS12 store, or the store password is wrong"
        ) from None
    return key, cert, list(extra)


def _pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _subject(chain: bytes) -> str | None:
    """The client certificate's subject (``CN=operator``), when it can be read."""
    try:
        from cryptography import x509
    except ImportError:
        return None
    start = chain.find(b"-----BEGIN CERTIFICATE-----")
    if start < 0:
        return None
    try:
        return str(x509.load_pem_x509_certificate(chain[start:]).subject.rfc4514_string())
    except ValueError:
        return None


_SSL_KEYS = (
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
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
        if ssl_settings.client_subject is not None:
            out.kwargs["client_certificate_subject"] = ssl_settings.client_subject
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
