"""KafkaEventLog configuration without a broker: Kafka property mapping, validation, errors.

Invariant checked: every accepted Kafka RLMM property lands on the right aiokafka
setting, an unsupported one is refused by name, and failures to reach a broker
surface as a typed error within a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import time
from pathlib import Path

import pytest
from aiokafka import errors as kafka_errors

from eventlog._kafka_admin import translate_error
from eventlog._kafka_config import map_properties, parse_jaas_config
from eventlog.errors import (
    EventLogConfigError,
    EventLogRecordTooLargeError,
    EventLogTransportError,
)
from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from eventlog.kafka_client import ClientSecurity
from eventlog.registry import known_options
from tests.fixtures.ports import free_port

P = "remote.log.metadata."
BOOT = {f"{P}common.client.bootstrap.servers": "k1:9092,k2:9092"}


def test_from_properties_maps_kafka_rlmm_names() -> None:
    log = KafkaEventLog.from_properties(
        {
            **BOOT,
            f"{P}topic.num.partitions": "7",
            f"{P}topic.replication.factor": "1",
            f"{P}topic.retention.ms": "604800000",
            f"{P}consume.wait.ms": "5000",
            f"{P}initialization.retry.max.timeout.ms": "9000",
            f"{P}common.client.client.id": "rlmm-7",
            f"{P}common.client.request.timeout.ms": "1234",
            f"{P}common.client.metadata.max.age.ms": "60000",
            f"{P}producer.linger.ms": "2",
            f"{P}producer.acks": "all",
            f"{P}producer.compression.type": "gzip",
            f"{P}producer.delivery.timeout.ms": "15000",
            f"{P}consumer.fetch.max.wait.ms": "100",
            f"{P}consumer.max.partition.fetch.bytes": "65536",
            "log.dirs": "/ignored/broker/setting",
        }
    )
    assert log.bootstrap_servers == "k1:9092,k2:9092"
    assert log.partition_count == 7
    assert log.replication_factor == 1
    assert log.retention_ms == 604800000
    assert log.consume_wait_ms == 5000
    assert log.settings.init_timeout_ms == 9000
    assert log._client_kwargs()["client_id"] == "rlmm-7"
    assert log._client_kwargs()["request_timeout_ms"] == 1234
    assert log.settings.delivery_timeout_ms == 15000
    assert log._producer_config == {
        "linger_ms": 2,
        "max_request_size": 1_048_576,
        "compression_type": "gzip",
        "metadata_max_age_ms": 60000,
    }
    assert log.settings.consumer_config == {
        "fetch_max_wait_ms": 100,
        "max_partition_fetch_bytes": 65536,
        "metadata_max_age_ms": 60000,
    }
    assert log.topic == "__remote_log_metadata"


def test_defaults_follow_kafka() -> None:
    log = KafkaEventLog.from_properties(BOOT)
    assert log.partition_count == 50
    assert log.replication_factor == 3
    assert log.retention_ms == -1
    assert log.consume_wait_ms == 120_000


def test_sasl_properties_map_to_aiokafka() -> None:
    log = KafkaEventLog.from_properties(
        {
            **BOOT,
            f"{P}common.client.security.protocol": "SASL_PLAINTEXT",
            f"{P}common.client.sasl.mechanism": "SCRAM-SHA-512",
            f"{P}common.client.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="rlmm" password="p\\"w";'
            ),
        }
    )
    kwargs = log._client_kwargs()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("rlmm", 'p"w')


def test_jaas_without_credentials_or_unknown_module_is_refused() -> None:
    with pytest.raises(EventLogConfigError, match="username"):
        parse_jaas_config("x", "org.apache.kafka.common.security.plain.PlainLoginModule required;")
    with pytest.raises(EventLogConfigError, match="Krb5LoginModule"):
        parse_jaas_config("x", "com.sun.security.auth.module.Krb5LoginModule required;")


def _self_signed_pem(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rlmm-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert_pem)
    keystore = tmp_path / "client.pem"
    keystore.write_bytes(cert_pem + key_pem)
    return ca, keystore


def test_pem_ssl_properties_build_an_ssl_context(tmp_path: Path) -> None:
    ca, keystore = _self_signed_pem(tmp_path)
    log = KafkaEventLog.from_properties(
        {
            **BOOT,
            f"{P}common.client.security.protocol": "SSL",
            f"{P}common.client.ssl.truststore.type": "PEM",
            f"{P}common.client.ssl.truststore.location": str(ca),
            f"{P}common.client.ssl.keystore.type": "PEM",
            f"{P}common.client.ssl.keystore.location": str(keystore),
            f"{P}common.client.ssl.endpoint.identification.algorithm": "",
        }
    )
    context = log._client_kwargs()["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert not context.check_hostname
    assert any(c.get("subject") for c in context.get_ca_certs())


def test_cafile_arguments_build_an_ssl_context(tmp_path: Path) -> None:
    ca, keystore = _self_signed_pem(tmp_path)
    log = KafkaEventLog(
        "k:9093",
        settings=KafkaLogSettings.from_options(
            {"security_protocol": "SSL", "cafile": str(ca), "certfile": str(keystore)}
        ),
    )
    assert isinstance(log._client_kwargs()["ssl_context"], ssl.SSLContext)


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({f"{P}common.client.ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS"),
        ({f"{P}common.client.sasl.login.class": "x"}, f"{P}common.client.sasl.login.class"),
        ({f"{P}producer.transactional.id": "t"}, f"{P}producer.transactional.id"),
        ({f"{P}consumer.group.id": "g"}, f"{P}consumer.group.id"),
        ({f"{P}no.such.thing": "1"}, f"{P}no.such.thing"),
        ({f"{P}producer.acks": "1"}, f"{P}producer.acks"),
        ({f"{P}producer.enable.idempotence": "true"}, f"{P}producer.enable.idempotence"),
        ({f"{P}topic.num.partitions": "many"}, f"{P}topic.num.partitions"),
        ({f"{P}common.client.security.protocol": "TLS"}, "security.protocol"),
        ({f"{P}consumer.check.crcs": "maybe"}, f"{P}consumer.check.crcs"),
    ],
)
def test_unsupported_or_invalid_properties_are_refused_by_name(
    props: dict[str, str], named: str
) -> None:
    with pytest.raises(EventLogConfigError) as info:
        KafkaEventLog.from_properties({**BOOT, **props})
    assert named in str(info.value)


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(EventLogConfigError, match=r"bootstrap\.servers"):
        KafkaEventLog.from_properties({f"{P}topic.num.partitions": "3"})


def test_constructor_validation() -> None:
    with pytest.raises(EventLogConfigError, match="partitions"):
        KafkaEventLog("k:9092", 0)
    with pytest.raises(EventLogConfigError, match="replication_factor"):
        KafkaEventLog("k:9092", 1, KafkaLogSettings(replication_factor=0))
    with pytest.raises(EventLogConfigError, match="acks"):
        KafkaEventLog("k:9092", settings=KafkaLogSettings(producer_config={"acks": 1}))
    with pytest.raises(EventLogConfigError, match="group_id"):
        KafkaEventLog("k:9092", settings=KafkaLogSettings(consumer_config={"group_id": "g"}))
    with pytest.raises(EventLogConfigError, match="compression_type"):
        KafkaEventLog(
            "k:9092", settings=KafkaLogSettings(producer_config={"compression_type": "brotli"})
        )
    with pytest.raises(EventLogConfigError, match="username"):
        ClientSecurity(security_protocol="SASL_SSL", sasl_mechanism="PLAIN")


def test_settings_from_a_configuration_s_flat_keys() -> None:
    """The ``[eventlog]`` keys a configuration gives are KafkaLogSettings' fields, its
    ClientSecurity's and the PEM file names; another key is refused by name."""
    settings = KafkaLogSettings.from_options(
        {"topic": "t", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
         "sasl_plain_username": "u", "sasl_plain_password": "p", "linger_ms": 1}
    )  # fmt: skip
    assert (settings.topic, settings.linger_ms) == ("t", 1)
    assert settings.security.principal == "User:u"
    assert "p" not in repr(settings.security)
    with pytest.raises(EventLogConfigError, match="topik"):
        KafkaLogSettings.from_options({"topik": "t"})
    with pytest.raises(EventLogConfigError, match="security"):
        KafkaLogSettings.from_options({"security": ClientSecurity()})
    # the keys it reads are the ones the registry lists (less the cluster's own)
    keys = set(KafkaLogSettings.config_keys())
    assert keys | {"bootstrap_servers", "partitions", "properties"} == known_options("kafka")
    assert not keys & {"ssl_context", "sasl_oauth_token_provider", "security"}


def test_settings_keep_their_own_copy_of_the_client_configs() -> None:
    given = {"linger_ms": 9}
    settings = KafkaLogSettings(producer_config=given)
    given["acks"] = 1  # the caller's dict changing later changes nothing
    assert dict(settings.producer_config) == {"linger_ms": 9}
    with pytest.raises(TypeError):
        settings.producer_config["acks"] = 1  # type: ignore[index]


def test_options_build_the_log_and_win_over_properties() -> None:
    log = KafkaEventLog.from_options(
        {
            "bootstrap_servers": "k:9092",
            "partitions": 4,
            "topic": "ours",
            "properties": {f"{P}topic.name": "theirs", f"{P}consume.wait.ms": "7"},
        }
    )
    assert (log.partition_count, log.topic, log.consume_wait_ms) == (4, "ours", 7)
    assert log.settings.consume_wait_ms == 7


def test_translate_error_keeps_retry_policy_and_names_the_operation() -> None:
    what = "append to t-3"
    timeout = translate_error(kafka_errors.KafkaTimeoutError(), what)
    assert isinstance(timeout, EventLogTransportError) and timeout.retriable
    assert what in str(timeout)
    conn = translate_error(kafka_errors.KafkaConnectionError("refused"), what)
    assert isinstance(conn, EventLogTransportError) and conn.retriable
    auth = translate_error(kafka_errors.SaslAuthenticationFailed(), what)
    assert isinstance(auth, EventLogTransportError) and not auth.retriable
    assert "authentication" in str(auth)
    denied = translate_error(kafka_errors.TopicAuthorizationFailedError(), what)
    assert isinstance(denied, EventLogTransportError) and not denied.retriable
    big = translate_error(kafka_errors.MessageSizeTooLargeError(), what)
    assert isinstance(big, EventLogRecordTooLargeError)
    config = translate_error(kafka_errors.KafkaConfigurationError("bad"), what)
    assert isinstance(config, EventLogConfigError)
    leader = translate_error(kafka_errors.NotLeaderForPartitionError(), what)
    assert isinstance(leader, EventLogTransportError) and leader.retriable


async def test_unreachable_bootstrap_fails_fast_with_transport_error() -> None:
    port = free_port()  # nothing listens there
    log = KafkaEventLog(
        f"127.0.0.1:{port}", 1, KafkaLogSettings(init_timeout_ms=1_500, request_timeout_ms=1_000)
    )
    started = time.monotonic()
    with pytest.raises(EventLogTransportError) as info:
        await log.start()
    elapsed = time.monotonic() - started
    assert info.value.retriable
    assert f"127.0.0.1:{port}" in str(info.value)
    assert elapsed < 10, f"start() took {elapsed:.1f}s against a dead address"
    await log.close()


async def test_a_refused_bootstrap_fails_within_the_wait_in_one_line() -> None:
    """Nothing listens there: the reason (refused) in one line, the wait's setting named,
    and aiokafka's error text not twice."""
    port = free_port()  # nothing listens there
    log = KafkaEventLog(f"127.0.0.1:{port}", 1, KafkaLogSettings(init_timeout_ms=2_000))
    started = time.monotonic()
    with pytest.raises(EventLogTransportError) as info:
        await log.start()
    elapsed = time.monotonic() - started
    await log.close()
    message = str(info.value)
    assert info.value.retriable
    assert f"127.0.0.1:{port} refused the connection" in message, message
    assert "not reachable within 2000 ms" in message, message
    assert "remote.log.metadata.initialization.retry.max.timeout.ms" in message
    assert message.count("KafkaConnectionError") <= 1 and "\n" not in message, message
    assert message.count(f"start kafka log {log.topic}") == 1, message
    assert elapsed < 5, f"start() took {elapsed:.1f}s with a 2 s wait"


async def test_a_refused_connection_is_not_waited_for_as_a_slow_start() -> None:
    """Nothing listens at the bootstrap (a broker that is down, a wrong port): with
    refused_timeout_ms set (the sidecar's 5 s), the default 30 s of Kafka's
    initialization wait (issue 46: the sidecar said so after 30 s) is not spent on a
    connection refused."""
    port = free_port()  # nothing listens there
    # init_timeout_ms: the default 30 s
    log = KafkaEventLog(f"127.0.0.1:{port}", 1, KafkaLogSettings(refused_timeout_ms=5_000))
    started = time.monotonic()
    with pytest.raises(EventLogTransportError) as info:
        await log.start()
    elapsed = time.monotonic() - started
    await log.close()
    message = str(info.value)
    assert elapsed < 10, f"start() took {elapsed:.1f}s on a refused connection"
    assert f"127.0.0.1:{port} refused the connection" in message, message
    assert "refused for 5000 ms" in message and "refused_timeout_ms" in message, message
    assert "\n" not in message and message.count("start kafka log") == 1, message
    # Unset, a refusal is waited for as long as anything else (a broker's plugin
    # process starts before the broker listens).
    unset = KafkaEventLog(f"127.0.0.1:{port}", 1, KafkaLogSettings(init_timeout_ms=2_500))
    with pytest.raises(EventLogTransportError, match="not reachable within 2500 ms"):
        await unset.start()
    await unset.close()


async def test_a_broker_that_accepts_while_starting_is_waited_for_past_the_refusals() -> None:
    """A broker that first refuses (its process starting), then accepts connections
    without answering yet (loading its logs): once something listens the wait is
    init_timeout_ms, not refused_timeout_ms."""
    port = free_port()
    settings = KafkaLogSettings(
        init_timeout_ms=4_000, refused_timeout_ms=1_500, request_timeout_ms=500
    )
    log = KafkaEventLog(f"127.0.0.1:{port}", 1, settings)
    held: list[asyncio.StreamWriter] = []

    async def accept(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never answered

    async def listen_later() -> asyncio.Server:
        await asyncio.sleep(0.8)
        return await asyncio.start_server(accept, "127.0.0.1", port)

    later = asyncio.create_task(listen_later())
    started = time.monotonic()
    try:
        with pytest.raises(EventLogTransportError) as info:
            await log.start()
        elapsed = time.monotonic() - started
    finally:
        await log.close()
        server = await later
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert "not reachable within 4000 ms" in str(info.value), info.value
    assert 3.5 < elapsed < 10, f"{elapsed:.1f}s"


async def test_a_retry_after_refusals_starts_once_a_broker_listens_not_a_backoff_later() -> None:
    """A broker's own plugin (rlmm serve) starts its event log before the broker's
    listener opens: refused, it retries with a growing backoff. Once something listens
    the next attempt starts within a poll (50 ms), not at the end of the backoff: it was
    half a second on average at 1 s, and so the broker's restart waited on it."""
    port = free_port()
    settings = KafkaLogSettings(
        init_timeout_ms=8_000, init_retry_backoff_ms=3_000, retry_backoff_max_ms=3_000,
        request_timeout_ms=500,
    )  # fmt: skip
    log = KafkaEventLog(f"127.0.0.1:{port}", 1, settings)
    spoke: list[float] = []  # when a connection sent its first bytes (a Kafka request)
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(ConnectionError):
            if await reader.read(1):
                spoke.append(time.monotonic())

    async def listen_later() -> tuple[asyncio.Server, float]:
        await asyncio.sleep(1.2)  # the first refusal's backoff runs until 3.0 s
        return await asyncio.start_server(accept, "127.0.0.1", port), time.monotonic()

    later = asyncio.create_task(listen_later())
    starting = asyncio.create_task(log.start())
    try:
        server, listening = await later
        deadline = time.monotonic() + 5
        while not spoke and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, EventLogTransportError):
            await starting
        await log.close()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert spoke, "no Kafka request reached the listener"
    assert spoke[0] - listening < 1.0, f"{spoke[0] - listening:.2f} s after it listened"


async def test_a_bootstrap_name_that_does_not_resolve_fails_at_once() -> None:
    """As Kafka's clients refuse "no resolvable bootstrap urls": not retried for the
    whole wait (30 s by default), and the message says the name does not resolve."""
    log = KafkaEventLog("nosuchhost.invalid:9092", 1)
    started = time.monotonic()
    with pytest.raises(EventLogConfigError) as info:
        await log.start()
    elapsed = time.monotonic() - started
    await log.close()
    assert "the name nosuchhost.invalid does not resolve" in str(info.value), info.value
    assert "nosuchhost.invalid:9092" in str(info.value)
    assert elapsed < 5, f"start() took {elapsed:.1f}s on a name that does not resolve"


async def test_one_resolvable_bootstrap_server_is_enough_to_try() -> None:
    """A name that does not resolve beside a reachable-but-refusing one: retried (the
    other may come up), and both reasons are given."""
    port = free_port()
    log = KafkaEventLog(
        f"nosuchhost.invalid:9092,127.0.0.1:{port}", 1, KafkaLogSettings(init_timeout_ms=1_000)
    )
    with pytest.raises(EventLogTransportError) as info:
        await log.start()
    await log.close()
    assert "nosuchhost.invalid does not resolve" in str(info.value)
    assert f"127.0.0.1:{port} refused the connection" in str(info.value)


def test_translated_errors_name_the_kafka_error_once() -> None:
    err = translate_error(kafka_errors.KafkaConnectionError("Unable to bootstrap"), "start x")
    assert str(err) == "start x: KafkaConnectionError: Unable to bootstrap"
    leader = translate_error(kafka_errors.NotLeaderForPartitionError(), "append to t-3")
    assert str(leader) == "append to t-3: [Error 6] NotLeaderForPartitionError"
    timeout = translate_error(kafka_errors.KafkaTimeoutError(), "append to t-3")
    assert str(timeout) == "append to t-3: timed out (KafkaTimeoutError)"


async def test_silent_peer_times_out_instead_of_hanging() -> None:
    """A peer that accepts TCP but never answers (a wrong port, a firewall) is bounded too."""
    connections: list[asyncio.StreamWriter] = []

    async def accept(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    log = KafkaEventLog(
        f"127.0.0.1:{port}", 1, KafkaLogSettings(init_timeout_ms=1_000, request_timeout_ms=500)
    )
    try:
        started = time.monotonic()
        with pytest.raises(EventLogTransportError, match="not reachable"):
            await log.start()
        assert time.monotonic() - started < 10
    finally:
        await log.close()
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()


def test_a_jks_store_is_refused_with_the_conversion_command(tmp_path: Path) -> None:
    props = {
        "remote.log.metadata.common.client.bootstrap.servers": "127.0.0.1:9093",
        "remote.log.metadata.common.client.security.protocol": "SSL",
        "remote.log.metadata.common.client.ssl.truststore.type": "JKS",
        "remote.log.metadata.common.client.ssl.truststore.location": str(tmp_path / "t.jks"),
    }
    with pytest.raises(EventLogConfigError, match="keytool -importkeystore"):
        map_properties(props)


def test_a_truststore_without_certificates_names_the_file(tmp_path: Path) -> None:
    store = tmp_path / "ca.pem"
    store.write_text("not a certificate\n")
    props = {
        "remote.log.metadata.common.client.bootstrap.servers": "127.0.0.1:9093",
        "remote.log.metadata.common.client.security.protocol": "SSL",
        "remote.log.metadata.common.client.ssl.truststore.location": str(store),
    }
    with pytest.raises(EventLogConfigError, match=r"ca\.pem"):
        map_properties(props)


def test_a_wrong_pkcs12_password_is_not_printed(tmp_path: Path) -> None:
    store = tmp_path / "client.p12"
    store.write_bytes(b"\x30\x82garbage")
    props = {
        "remote.log.metadata.common.client.bootstrap.servers": "127.0.0.1:9093",
        "remote.log.metadata.common.client.security.protocol": "SSL",
        "remote.log.metadata.common.client.ssl.keystore.type": "PKCS12",
        "remote.log.metadata.common.client.ssl.keystore.location": str(store),
        "remote.log.metadata.common.client.ssl.keystore.password": "s3cr3t-p12",
    }
    with pytest.raises(EventLogConfigError) as e:
        map_properties(props)
    assert "client.p12" in str(e.value) and "s3cr3t-p12" not in str(e.value)
