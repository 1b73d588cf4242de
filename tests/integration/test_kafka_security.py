"""rlmm on a locked-down Apache Kafka: SASL_SSL (SCRAM-SHA-512), mutual TLS and ACLs.

The writer (SCRAM) runs the `rlmm offload` sidecar over the broker's own log dir; the
read-only operator (a client certificate, as PEM files and as PKCS12 stores) runs the
CLI and a Spark `kafka-archive` read. Every refusal is checked for its one line (the
principal, the operation, the resource or the credential at fault), its exit code,
its time to fail, and for nothing uploaded. Everything these tests print, at debug
level included, is scanned for the test's passwords and private keys.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

from rlmm.config import load_config
from rlmm.errors import RemoteStorageNotReadyError
from rlmm.factory import create_manager, open_event_log
from rlmm.model import TopicIdPartition
from rlmm.offload.logdir import read_offset_checkpoint
from tests.fixtures.apache_kafka import ApacheKafkaUnavailable
from tests.fixtures.kafka import BrokerStartError
from tests.fixtures.kafka_security import PASSWORDS, PKCS12_PASSWORD, SCRAM, Pki, SecureKafka
from tests.fixtures.ports import free_port
from tests.rlmm.factories import segment
from tests.rlmm.offload.test_health import get, spawn_offload, stop, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
SEGMENT_MS = 1500
DENIED_WITHIN_S = 10.0
OUTPUTS: list[str] = []  # everything the tests captured, scanned at the end


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    try:
        kafka = SecureKafka(tmp_path_factory.mktemp("secure-kafka"))
    except ApacheKafkaUnavailable as e:
        pytest.skip(f"Apache Kafka tests need Java and Maven: {e}")
    try:
        kafka.start()
    except BrokerStartError as e:
        kafka.broker.kill()
        pytest.fail(f"the locked-down broker did not start: {e}", pytrace=False)
    try:
        # as in production: an admin creates the metadata topic, the roles use it
        asyncio.run(create_topic(kafka, "__remote_log_metadata", 3, {"retention.ms": "-1"}))
        yield kafka
    finally:
        kafka.stop()


def config_file(path: Path, kafka_props: dict[str, str], data_dir: Path, extra: str = "") -> Path:
    """An rlmm config with Kafka's own property names, as an operator pastes them."""
    props = "".join(
        f'"remote.log.metadata.common.client.{k}" = {json.dumps(v)}\n'
        for k, v in kafka_props.items()
    )
    path.write_text(
        f'broker_id = 1\ndata_dir = "{data_dir}"\n{props}\n'
        f'[eventlog]\ntype = "kafka"\npartitions = 3\nreplication_factor = 1\n'
        f'[remote]\ntype = "local"\nroot = "{data_dir / "remote"}"\n{extra}'
    )
    return path


def rlmm(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "--debug", *args, "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    OUTPUTS.append(done.stdout + done.stderr)
    return done


def admin_kwargs(secure: SecureKafka) -> dict[str, Any]:
    return {
        "bootstrap_servers": secure.sasl_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": SCRAM,
        "sasl_plain_username": "admin",
        "sasl_plain_password": PASSWORDS["admin"],
        "ssl_context": create_ssl_context(cafile=str(secure.pki.ca)),
    }


async def create_topic(
    secure: SecureKafka, topic: str, partitions: int, configs: dict[str, str]
) -> None:
    admin = AIOKafkaAdminClient(**admin_kwargs(secure))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def produce_topic(secure: SecureKafka, topic: str) -> dict[int, list[bytes]]:
    """A topic with rolled segments, written as the admin; its values per partition."""
    configs = {"segment.ms": str(SEGMENT_MS), "retention.ms": "-1"}
    await create_topic(secure, topic, PARTITIONS, configs)
    producer = AIOKafkaProducer(acks="all", **admin_kwargs(secure))
    await producer.start()
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        for i in range(40):
            value = f"secure-{i}".encode() * (1 + i % 3)
            await producer.send_and_wait(topic, value, key=b"k", partition=i % PARTITIONS)
            values[i % PARTITIONS].append(value)
        await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)
        ends = {}
        for p in range(PARTITIONS):  # rolls the segment the records are in
            ends[p] = (await producer.send_and_wait(topic, b"roll", partition=p)).offset
    finally:
        await producer.stop()
    # the sidecar copies nothing past the checkpointed high watermark: wait for it
    checkpoint = secure.broker.data_dir / "replication-offset-checkpoint"
    async with asyncio.timeout(60):
        while True:
            marks = read_offset_checkpoint(checkpoint)
            if all(marks.get((topic, p), -1) > end for p, end in ends.items()):
                return values
            await asyncio.sleep(0.5)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error line of a refused command (its --debug traceback aside; the sidecar's
    starts with the time)."""
    lines = [x for x in done.stderr.splitlines() if re.match(r"(\S+ \S+ )?error: ", x)]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def archived(
    secure: SecureKafka, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[int, list[bytes]], Path]:
    """A topic offloaded by the sidecar running as the writer (SCRAM over TLS)."""
    tmp = tmp_path_factory.mktemp("writer")
    topic = f"secure-{uuid4().hex[:8]}"
    values = asyncio.run(produce_topic(secure, topic))
    extra = (
        '[offload]\n"remote.storage.enable" = false\n'
        f'[offload.topics.{topic}]\n"remote.storage.enable" = true\n"retention.ms" = -1\n'
    )
    writer = config_file(tmp / "writer.toml", secure.sasl_properties("writer"), tmp / "rlmm", extra)
    done = rlmm(writer, "offload", "--once", "--log-dir", str(secure.broker.data_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    return topic, values, tmp / "rlmm"


def test_writer_offloads_and_the_operator_reads_with_a_certificate(
    secure: SecureKafka, archived: tuple[str, dict[int, list[bytes]], Path], tmp_path: Path
) -> None:
    topic, values, data_dir = archived
    pem = config_file(tmp_path / "pem.toml", secure.mtls_properties("operator"), data_dir)
    keystore, truststore = secure.pki.pkcs12(secure.identities["operator"])
    p12_props = {
        "bootstrap.servers": secure.ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": PKCS12_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": PKCS12_PASSWORD,
    }
    p12 = config_file(tmp_path / "p12.toml", p12_props, data_dir)
    for config in (pem, p12):
        listed = rlmm(config, "segments", "list", "--topic", topic, "--json")
        assert listed.returncode == 0, listed.stderr[-3000:]
        segments = json.loads(listed.stdout)["segments"]
        assert {s["partition"] for s in segments} == set(range(PARTITIONS))
        assert all(s["state"] == "COPY_SEGMENT_FINISHED" for s in segments)
        verified = rlmm(config, "verify", "--deep")
        assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    for p in range(PARTITIONS):
        read = rlmm(pem, "records", topic, "--partition", str(p), "--format", "raw")
        assert read.returncode == 0, read.stderr[-3000:]
        assert read.stdout.encode().splitlines() == values[p]
    # the secrets are in the config, not in what `rlmm config` shows
    shown = rlmm(p12, "config", "--json")
    assert shown.returncode == 0 and PKCS12_PASSWORD not in shown.stdout


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_the_operator_reads_with_other_sasl_mechanisms(
    secure: SecureKafka,
    archived: tuple[str, dict[int, list[bytes]], Path],
    tmp_path: Path,
    mechanism: str,
) -> None:
    topic, _values, data_dir = archived
    props = secure.sasl_properties("operator", mechanism=mechanism)
    config = config_file(tmp_path / "c.toml", props, data_dir)
    listed = rlmm(config, "segments", "list", "--topic", topic, "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert {s["partition"] for s in json.loads(listed.stdout)["segments"]} == set(range(PARTITIONS))
    wrong = config_file(
        tmp_path / "w.toml", secure.sasl_properties("operator", "bad", mechanism), data_dir
    )
    refused = rlmm(wrong, "segments", "list")
    assert refused.returncode == 2 and f"User:operator ({mechanism})" in one_line(refused)


@pytest.mark.spark
def test_spark_reads_the_archive_as_the_operator(
    secure: SecureKafka,
    archived: tuple[str, dict[int, list[bytes]], Path],
    tmp_path: Path,
    spark: Any,
) -> None:
    import rlmm.spark

    rlmm.spark.register(spark)
    topic, values, data_dir = archived
    config = config_file(tmp_path / "spark.toml", secure.mtls_properties("operator"), data_dir)
    df = spark.read.format("kafka-archive").option("config", str(config))
    rows = df.option("subscribe", topic).load().orderBy("partition", "offset").collect()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for row in rows:
        got[row["partition"]].append(bytes(row["value"]))
    assert got == values


def refused(secure: SecureKafka, tmp_path: Path, case: str) -> tuple[dict[str, str], list[str]]:
    """Client properties of each refusal, and what its one line must name."""
    if case == "no ACL":
        return secure.sasl_properties("nobody"), [
            "User:nobody",
            "DESCRIBE",
            "__remote_log_metadata",
        ]
    if case == "wrong password":
        return secure.sasl_properties("writer", "not-the-password"), [
            "authentication failed", "User:writer", SCRAM, "sasl.jaas.config",
        ]  # fmt: skip
    if case == "unknown user":
        return secure.sasl_properties("ghost", "whatever"), ["authentication failed", "User:ghost"]
    if case == "host mismatch":
        props = secure.mtls_properties("operator")
        props["bootstrap.servers"] = f"localhost:{secure.ssl_port}"
        return props, ["TLS", "localhost", "not trusted", "Hostname mismatch"]
    assert case == "untrusted certificate"
    stranger = Pki(tmp_path / "other-ca").issue("operator")
    props = secure.mtls_properties("operator")
    props["ssl.keystore.location"] = str(stranger.pem)
    return props, ["TLS", "refused", "CN=operator", "ssl.keystore"]


@pytest.mark.parametrize(
    "case", ["no ACL", "wrong password", "unknown user", "host mismatch", "untrusted certificate"]
)
def test_a_refusal_is_one_line_and_exit_2_within_seconds(
    secure: SecureKafka, tmp_path: Path, case: str
) -> None:
    props, named = refused(secure, tmp_path, case)
    config = config_file(tmp_path / "c.toml", props, tmp_path / "rlmm")
    for command in (["events"], ["segments", "list"]):
        started = time.monotonic()
        done = rlmm(config, *command)
        took = time.monotonic() - started
        assert done.returncode == 2, done.stderr[-3000:]
        line = one_line(done)
        for word in named:
            assert word in line, line
        assert took < DENIED_WITHIN_S, f"{case}: {took:.1f}s"


def test_the_sidecar_denied_uploads_nothing(secure: SecureKafka, tmp_path: Path) -> None:
    """Writing as a principal without WRITE: one line, exit 2, no object uploaded."""
    topic = f"denied-{uuid4().hex[:8]}"
    asyncio.run(produce_topic(secure, topic))
    extra = (
        '[offload]\n"remote.storage.enable" = false\n'
        f'[offload.topics.{topic}]\n"remote.storage.enable" = true\n"retention.ms" = -1\n'
    )
    for user in ("operator", "nobody"):
        data_dir = tmp_path / user
        config = config_file(
            tmp_path / f"{user}.toml", secure.sasl_properties(user), data_dir, extra
        )
        started = time.monotonic()
        done = rlmm(config, "offload", "--once", "--log-dir", str(secure.broker.data_dir))
        assert done.returncode == 2, done.stderr[-3000:]
        assert f"User:{user}" in one_line(done)
        assert time.monotonic() - started < 30
        stored = [p for p in (data_dir / "remote").rglob("*") if p.is_file()]
        assert stored == [], stored


async def test_the_manager_fails_closed_when_it_may_not_read(
    secure: SecureKafka, tmp_path: Path
) -> None:
    """DESCRIBE but no READ: it starts; its partitions stay not ready, every call on
    them answers with the reason (principal, READ, topic) at once, nothing spins."""
    config = load_config(
        config_file(tmp_path / "a.toml", secure.sasl_properties("auditor"), tmp_path / "rlmm"),
        env={},
    )
    manager = create_manager(config, open_event_log(config))
    await manager.start()
    try:
        tp = TopicIdPartition(uuid4(), "orders", 0)
        started = time.monotonic()
        await manager.on_partition_leadership_changes([tp], [])
        with pytest.raises(RemoteStorageNotReadyError) as denied:
            await manager.wait_until_ready([tp], 30)
        assert time.monotonic() - started < DENIED_WITHIN_S
        for word in ("User:auditor", "READ", "__remote_log_metadata"):
            assert word in str(denied.value)
        assert not manager.is_ready(tp)
        reason = manager.not_ready_reason(tp)
        assert reason is not None and "User:auditor" in reason and "READ" in reason
        with pytest.raises(RemoteStorageNotReadyError, match="User:auditor"):
            await manager.add_remote_log_segment_metadata(segment(tp, 0, 9, {0: 0}))
        with pytest.raises(RemoteStorageNotReadyError, match="User:auditor"):
            manager.list_remote_log_segments(tp)
    finally:
        await manager.close()


def test_a_refused_long_running_sidecar_stays_up_not_ready(
    secure: SecureKafka, tmp_path: Path
) -> None:
    """Without --once, a sidecar Kafka will not let in keeps running: /readyz 503 with
    the line, the denied gauge at 1, nothing copied, and a SIGTERM still stops it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    props = secure.sasl_properties("writer", "not-the-password")
    config = config_file(tmp_path / "c.toml", props, tmp_path / "rlmm")
    port = free_port()
    proc = spawn_offload(config, logs, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "/readyz to say why",
            lambda: "authentication failed for User:writer" in get(f"{base}/readyz")[2],
            proc,
            timeout=30,
        )
        status, _type, body = get(f"{base}/readyz")
        assert status == 503 and "sasl.jaas.config" in body, body
        metrics = get(f"{base}/metrics")[2]
        assert "rlmm_offload_metadata_denied 1.0" in metrics
        assert get(f"{base}/healthz")[0] == 200 and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        OUTPUTS.append(out + err + body + metrics)
        assert proc.returncode == 0, err[-2000:]
    finally:
        stop(proc)


def test_no_output_holds_a_secret(secure: SecureKafka) -> None:
    """Runs last in this module: every captured output, and the broker's log."""
    assert OUTPUTS, "the tests above captured nothing"
    captured = "\n".join(OUTPUTS)
    for secret in secure.secrets():
        assert secret.decode() not in captured, "a secret was printed"
