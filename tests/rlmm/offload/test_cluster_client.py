"""ClusterClient and the sidecar when leadership cannot be learned (no broker needed:
a closed port, and a listener that never answers)."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmm.offload.cluster import ClusterClient, quiet_abandoned_connections
from rlmm.offload.errors import LeadershipError
from tests.rlmm.offload.test_sidecar import log_dir, write_config


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_broker() -> Iterator[int]:
    """A listener that accepts connections and never answers a request."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    server.settimeout(0.1)

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    import threading

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()
        for conn in held:
            conn.close()


async def test_unreachable_cluster_is_a_leadership_error_within_the_bound() -> None:
    client = ClusterClient({"bootstrap_servers": f"127.0.0.1:{closed_port()}"}, 1, timeout_s=3)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(LeadershipError, match=r"127\.0\.0\.1"):
            await client.view({"orders"})
        assert loop.time() - started < 10
    finally:
        await client.close()
        await client.close()  # idempotent


async def test_a_cancelled_view_ends_even_inside_aiokafka(silent_broker: int) -> None:
    """A poll cancelled while aiokafka waits on a broker ends with CancelledError (aiokafka
    turns cancellation into its own errors; read as a cluster failure, it was swallowed
    and the sidecar waited for its poll forever)."""
    client = ClusterClient({"bootstrap_servers": f"127.0.0.1:{silent_broker}"}, 1, timeout_s=30)
    try:
        task = asyncio.create_task(client.view({"orders"}))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    finally:
        await client.close()


def test_once_with_leadership_unknown_exits_2_and_copies_nothing(tmp_path: Path) -> None:
    logs, _pdirs, _audit = log_dir(tmp_path)
    port = closed_port()
    path = write_config(tmp_path, f'"bootstrap.servers" = "127.0.0.1:{port}"\n')
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "offload", "--once", "--config", str(path),
         "--log-dir", str(logs)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if " error: " in ln]
    assert "leadership unknown" in line and f"127.0.0.1:{port}" in line, line
    assert line.count("KafkaConnectionError") == 1, line
    assert not list((tmp_path / "data" / "remote").glob("**/*.log"))


async def test_a_connection_a_timed_out_view_abandoned_is_a_warning_not_an_error(
    silent_broker: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that accepts and never answers (a SIGSTOPped one): the view times out
    with the connect in flight, aiokafka closes the abandoned connection when it is
    collected and reports it to the loop. That is a warning; any other unhandled
    error the loop sees is still logged as an error."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    quiet_abandoned_connections(loop)
    client = ClusterClient({"bootstrap_servers": f"127.0.0.1:{silent_broker}"}, 1, timeout_s=1)
    try:
        with caplog.at_level(logging.WARNING):
            with pytest.raises(LeadershipError, match="did not answer"):
                await client.view({"orders"})
            gc.collect()
            loop.call_exception_handler({"message": "Unclosed AIOKafkaConnection", "conn": 1})
            loop.call_exception_handler({"message": "something else went wrong"})
            await asyncio.sleep(0)
    finally:
        await client.close()
        loop.set_exception_handler(previous)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["something else went wrong"]
    assert any("abandoned" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)  # fmt: skip


async def test_its_own_broker_down_is_one_line_and_the_others_answer(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sidecar of a broker that died asks its own broker first at every poll: it
    says once that broker 1 is unreachable (not a line per poll, nor aiokafka's
    NodeNotReadyError), learns leadership from broker 2 meanwhile, and says when broker
    1 answers again. The event log's BrokerReachability is shared: one outage, one line."""
    from types import SimpleNamespace

    from aiokafka import errors as kafka_errors

    from eventlog.kafka import BrokerReachability
    from rlmm.offload.cluster import ClusterView

    shared = BrokerReachability()
    client = ClusterClient({"bootstrap_servers": "kafka-1:9092"}, 1, timeout_s=3, brokers=shared)
    down = {1}
    asked: list[int] = []
    fake = SimpleNamespace(
        cluster=SimpleNamespace(
            brokers=lambda: [SimpleNamespace(nodeId=1), SimpleNamespace(nodeId=2)],
            broker_metadata=lambda n: SimpleNamespace(host=f"kafka-{n}", port=9092),
        )
    )

    async def connected() -> object:
        return fake

    async def ask(_client: object, node: int, _topics: object, brokers: frozenset[int]) -> object:
        asked.append(node)
        if node in down:
            raise kafka_errors.NodeNotReadyError(f"not ready (node id {node})")
        return ClusterView({}, frozenset(), brokers)

    monkeypatch.setattr(client, "_connected", connected)
    monkeypatch.setattr(client, "_ask", ask)
    with caplog.at_level(logging.INFO):
        for _ in range(4):
            await client.view({"orders"})
        down.clear()
        await client.view({"orders"})
    assert asked == [1, 2, 1, 2, 1, 2, 1, 2, 1]
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0][0] == "WARNING" and lines[0][1].startswith(
        "broker 1 at kafka-1:9092 is unreachable (no connection could be opened)"
    ), lines
    assert lines[1][0] == "INFO" and lines[1][1].startswith(
        "broker 1 at kafka-1:9092 answers again"
    )
    assert client.brokers is shared and shared.down() == {}


def test_the_sidecar_shows_broker_lines_and_not_aiokafkas(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka logs a line per failed connection: quiet in the sidecar (its own
    one-line errors name the broker); rlmm's line for a broker back is INFO, shown."""
    from click.testing import CliRunner

    import rlmm.offload.sidecar as sidecar
    from rlmm.cli import main

    levels: dict[str, int] = {}

    async def record(*_args: object, **_kwargs: object) -> object:
        for name in ("aiokafka.conn", "aiokafka.producer.sender", "eventlog.brokers"):
            levels[name] = logging.getLogger(name).getEffectiveLevel()
        raise SystemExit(0)

    monkeypatch.setattr(sidecar, "run_sidecar", record)
    CliRunner().invoke(main, ["offload", "--log-dir", "/nonexistent", "--set", "data_dir=/tmp/x"])
    assert levels == {
        "aiokafka.conn": logging.CRITICAL,
        "aiokafka.producer.sender": logging.CRITICAL,
        "eventlog.brokers": logging.INFO,
    }
