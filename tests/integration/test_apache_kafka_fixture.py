"""The Apache Kafka fixture itself: tiered storage on, clear start failures, no stray JVM.

Invariants checked: the session broker runs Kafka's own RLMM (its
``__remote_log_metadata`` exists with the configured partitions); a broker that
cannot start fails with its log tail and leaves no process; a broker whose test
process is SIGKILLed (no teardown, no atexit) is killed by its guard.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.fixtures.apache_kafka import (
    ENV_ENABLE,
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    ApacheKafkaBroker,
    ApacheKafkaUnavailable,
    kafka_libs,
    new_broker,
)
from tests.fixtures.kafka import BrokerStartError

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (it holds no port, no memory).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_missing_java_or_maven_is_a_skip_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ENABLE, "1")
    monkeypatch.setattr("shutil.which", lambda name: None if name == "mvn" else f"/bin/{name}")
    with pytest.raises(ApacheKafkaUnavailable, match="mvn not on PATH"):
        kafka_libs()
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ApacheKafkaUnavailable, match="java and mvn not on PATH"):
        kafka_libs()
    monkeypatch.setenv(ENV_ENABLE, "0")
    with pytest.raises(ApacheKafkaUnavailable, match=f"{ENV_ENABLE}=0"):
        kafka_libs()


async def test_session_broker_runs_kafkas_own_rlmm(apache_kafka_broker: ApacheKafkaBroker) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=apache_kafka_broker.bootstrap)
    await admin.start()
    try:
        # Kafka's RLMM creates its topic in the background after the broker is up.
        async with asyncio.timeout(60):
            while METADATA_TOPIC not in await admin.list_topics():
                await asyncio.sleep(0.2)
        [described] = await admin.describe_topics([METADATA_TOPIC])
    finally:
        await admin.close()
    assert len(described["partitions"]) == METADATA_PARTITIONS
    assert "TopicBasedRemoteLogMetadataManager" in apache_kafka_broker.log_path.read_text()


@pytest.mark.slow
def test_broker_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    broker = new_broker(tmp_path / "broker")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker.port = taken.getsockname()[1]
        with pytest.raises(BrokerStartError) as info:
            broker.start(timeout=60)
    message = str(info.value)
    assert "Apache Kafka" in message and "Address already in use" in message
    assert not broker.running and broker.process is None


CHILD = """
import sys, pathlib
from tests.fixtures.apache_kafka import ApacheKafkaBroker
broker = ApacheKafkaBroker(pathlib.Path(sys.argv[1]))
broker.start()
print(broker.process.pid, flush=True)
sys.stdin.read()  # until the parent kills us
"""


@pytest.mark.slow
def test_broker_dies_with_a_sigkilled_test_process(tmp_path: Path) -> None:
    new_broker(tmp_path / "unused")  # skips without Java/Maven; fetches the jars
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "broker")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    ) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip(), f"the child did not start a broker (exit {child.poll()})"
            jvm = int(line)
            assert pid_alive(jvm)
            child.send_signal(signal.SIGKILL)  # no teardown, no atexit: only the guard is left
            child.wait(timeout=10)
            deadline = time.monotonic() + 15
            while pid_alive(jvm) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not pid_alive(jvm), f"JVM {jvm} outlived its SIGKILLed test process"
        finally:
            if child.poll() is None:
                child.kill()
