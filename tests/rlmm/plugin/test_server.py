"""rlmm serve over its socket, driven as the JVM bridge drives it (no JVM here: the
broker tests in tests/integration/test_kafka_plugin.py run the real bridge)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from rlmm.plugin.errors import AlreadyServingError
from rlmm.plugin.server import PluginServer
from tests.remote.conftest import make_metadata, write_segment
from tests.rlmm.plugin.bridge_client import (
    BridgeClient,
    CallError,
    new_tp,
    unwire,
    wire,
    wire_tp,
)

BROKER_PROPS = {"broker.id": "1", "cluster.id": "test-cluster", "log.dir": "/nonexistent"}


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "rlmm.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        '[eventlog]\ntype = "file"\npartitions = 3\n'
        '[remote]\ntype = "local"\n'
    )
    return config


async def started(server: PluginServer) -> asyncio.Task[None]:
    up = asyncio.Event()
    task = asyncio.create_task(server.serve(ready=lambda _s: up.set()))
    waiting = asyncio.create_task(up.wait())
    await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED, timeout=30)
    if task.done():
        waiting.cancel()
        task.result()
    assert up.is_set()
    return task


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[PluginServer]:
    server = PluginServer(write_config(tmp_path), tmp_path / "serve.sock")
    task = await started(server)
    try:
        yield server
    finally:
        server.stop()
        await asyncio.wait_for(task, 30)


@pytest.fixture
async def bridge(serve: PluginServer) -> AsyncIterator[BridgeClient]:
    client = await BridgeClient.connect(serve.socket_path)
    await client.hello("rlmm")
    await client.call("configure", role="rsm", props=dict(BROKER_PROPS))
    await client.call("configure", role="rlmm", props=dict(BROKER_PROPS))
    try:
        yield client
    finally:
        await client.close()


async def until_ready(client: BridgeClient, tp_wire: dict[str, object]) -> None:
    deadline = time.monotonic() + 30
    while not await client.call("rlmm.is_ready", topic_id_partition=tp_wire):
        assert time.monotonic() < deadline, "the partition never became ready"
        await asyncio.sleep(0.05)


def finished_update(
    md: RemoteLogSegmentMetadata, custom: bytes | None
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id,
        md.event_timestamp_ms + 1,
        custom,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        1,
    )


async def tier(
    client: BridgeClient,
    tmp_path: Path,
    *,
    start: int = 1000,
    txn: bool = True,
    seed: int = 0,
    log_size: int = 300_000,
) -> tuple[RemoteLogSegmentMetadata, dict[str, bytes]]:
    files = write_segment(
        tmp_path / f"log-{start}", log_size=log_size, with_txn=txn, seed=seed, name=f"{start:020d}"
    )
    md = make_metadata(start_offset=start, size=len(files.contents["log_segment"]))
    tp = wire_tp(md.topic_id_partition)
    await client.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
    await until_ready(client, tp)
    await client.call("rlmm.add_remote_log_segment_metadata", metadata=wire(md))
    data = files.data
    copied = await client.call(
        "rsm.copy_log_segment_data",
        metadata=wire(md),
        log_segment=str(data.log_segment),
        offset_index=str(data.offset_index),
        time_index=str(data.time_index),
        transaction_index=None if data.transaction_index is None else str(data.transaction_index),
        producer_snapshot_index=str(data.producer_snapshot_index),
        leader_epoch_index=data.leader_epoch_index,
    )
    custom = copied["custom_metadata"]
    assert isinstance(custom, bytes) and len(custom) <= 128  # Kafka's default cap
    update = finished_update(md, custom)
    await client.call("rlmm.update_remote_log_segment_metadata", metadata=wire(update))
    return md.create_with_updates(update), files.contents


async def test_copy_then_every_lookup_and_fetch_answers_as_kafka_asks(
    bridge: BridgeClient, tmp_path: Path
) -> None:
    md, contents = await tier(bridge, tmp_path)
    tp = wire_tp(md.topic_id_partition)
    found = unwire(
        await bridge.call(
            "rlmm.remote_log_segment_metadata", topic_id_partition=tp, epoch=0, offset=1050
        )
    )
    assert found == md
    assert (
        await bridge.call("rlmm.highest_offset_for_epoch", topic_id_partition=tp, leader_epoch=0)
        == md.end_offset
    )
    listed = await bridge.call(
        "rlmm.list_remote_log_segments", topic_id_partition=tp, leader_epoch=None
    )
    assert [unwire(m) for m in listed["segments"]] == [md]
    by_epoch = await bridge.call(
        "rlmm.list_remote_log_segments", topic_id_partition=tp, leader_epoch=0
    )
    assert [unwire(m) for m in by_epoch["segments"]] == [md]
    assert by_epoch["version"] == listed["version"]
    assert (
        await bridge.call("rlmm.remote_log_size", topic_id_partition=tp, leader_epoch=0)
        == md.segment_size_in_bytes
    )
    txn = await bridge.call(
        "rlmm.next_segment_with_txn_index", topic_id_partition=tp, epoch=0, offset=1000
    )
    assert unwire(txn) == md
    assert (
        await bridge.call(
            "rlmm.remote_log_segment_metadata", topic_id_partition=tp, epoch=0, offset=5000
        )
        is None
    )

    # The log in chunks, as the bridge's stream asks for it: equal to the local file.
    chunks, position = [], 0
    while chunk := await bridge.call(
        "rsm.fetch_log_segment", metadata=wire(md), position=position, length=65536
    ):
        assert len(chunk) <= 65536
        chunks.append(chunk)
        position += len(chunk)
    assert b"".join(chunks) == contents["log_segment"]
    middle = await bridge.call(
        "rsm.fetch_log_segment", metadata=wire(md), position=1234, length=100
    )
    assert middle == contents["log_segment"][1234:1334]
    for kind, name in (
        ("OFFSET", "offset_index"),
        ("TIMESTAMP", "time_index"),
        ("PRODUCER_SNAPSHOT", "producer_snapshot_index"),
        ("TRANSACTION", "transaction_index"),
        ("LEADER_EPOCH", "leader_epoch_index"),
    ):
        assert (
            await bridge.call("rsm.fetch_index", metadata=wire(md), index_type=kind)
            == (contents[name])
        )

    await bridge.call("rsm.delete_log_segment_data", metadata=wire(md))
    with pytest.raises(CallError) as gone:
        await bridge.call("rsm.fetch_log_segment", metadata=wire(md), position=0, length=10)
    assert gone.value.kind == "not_found"


async def test_a_segment_without_transactions_has_no_txn_index_not_found(
    bridge: BridgeClient, tmp_path: Path
) -> None:
    md, _ = await tier(bridge, tmp_path, txn=False)
    with pytest.raises(CallError) as missing:
        await bridge.call("rsm.fetch_index", metadata=wire(md), index_type="TRANSACTION")
    # Kafka's RemoteIndexCache reads RemoteResourceNotFoundException as "no aborted txns"
    assert missing.value.kind == "not_found"


async def test_many_calls_in_flight_are_each_answered_by_id(
    bridge: BridgeClient, tmp_path: Path
) -> None:
    md, contents = await tier(bridge, tmp_path)
    positions = list(range(0, 200_000, 997))
    chunks = await asyncio.gather(
        *(
            bridge.call("rsm.fetch_log_segment", metadata=wire(md), position=p, length=300)
            for p in positions
        )
    )
    assert chunks == [contents["log_segment"][p : p + 300] for p in positions]


async def test_bad_calls_get_one_line_errors_and_the_connection_stays(
    bridge: BridgeClient, serve: PluginServer
) -> None:
    with pytest.raises(CallError) as unknown:
        await bridge.call("rsm.no_such_call")
    assert unknown.value.kind == "protocol" and "unknown method 'rsm.no_such_call'" in str(
        unknown.value
    )
    with pytest.raises(CallError) as unhashable:  # a list: no method, and not a dict key
        await bridge.call(["rlmm.is_ready"])
    assert unhashable.value.kind == "protocol", unhashable.value
    with pytest.raises(CallError) as bad:
        await bridge.call("rlmm.is_ready", topic_id_partition={"topic_id": b"short"})
    assert bad.value.kind == "protocol" and "16 bytes" in bad.value.message
    with pytest.raises(CallError) as not_metadata:
        await bridge.call("rsm.fetch_index", metadata=b"\x00\x01garbage", index_type="OFFSET")
    assert not_metadata.value.kind == "codec"
    # A broken frame closes that connection only.
    reader, writer = await asyncio.open_unix_connection(str(serve.socket_path))
    writer.write(b"\x00\x00\x00\x03abc")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    assert (
        await bridge.call(
            "rlmm.is_ready",
            topic_id_partition={"topic_id": bytes(16), "topic": "t", "partition": 0},
        )
        is False
    )


async def test_calls_before_configure_are_not_ready(serve: PluginServer, tmp_path: Path) -> None:
    client = await BridgeClient.connect(serve.socket_path)
    try:
        await client.hello("rsm")
        md = make_metadata(size=10)
        with pytest.raises(CallError) as early:
            await client.call("rsm.fetch_index", metadata=wire(md), index_type="OFFSET")
        assert early.value.kind == "not_ready"
        with pytest.raises(CallError) as early_rlmm:
            await client.call(
                "rlmm.highest_offset_for_epoch",
                topic_id_partition=wire_tp(md.topic_id_partition),
                leader_epoch=0,
            )
        assert early_rlmm.value.kind == "not_ready"
        assert (
            await client.call("rlmm.is_ready", topic_id_partition=wire_tp(md.topic_id_partition))
            is False
        )
    finally:
        await client.close()


async def test_a_bridge_of_another_release_is_refused_in_one_line(serve: PluginServer) -> None:
    client = await BridgeClient.connect(serve.socket_path)
    try:
        with pytest.raises(CallError) as refused:
            await client.hello("rsm", version="0.0.1")
    finally:
        await client.close()
    assert refused.value.kind == "version_mismatch"
    assert "release 0.0.1" in refused.value.message and "\n" not in refused.value.message


async def test_a_second_serve_on_the_same_socket_is_refused(
    serve: PluginServer, tmp_path: Path
) -> None:
    second = PluginServer(write_config(tmp_path), serve.socket_path)
    with pytest.raises(AlreadyServingError, match="another rlmm serve holds"):
        await second.serve()
    assert serve.socket_path.exists()  # the first one's socket is left alone


async def test_a_restarted_serve_keeps_the_tier_and_its_assignment_comes_again(
    tmp_path: Path,
) -> None:
    """What the bridge does after rlmm serve died: a new process, hello, configure, the
    leadership again; the segment copied before is still found and read."""
    config = write_config(tmp_path)
    first = PluginServer(config, tmp_path / "serve.sock")
    task = await started(first)
    client = await BridgeClient.connect(first.socket_path)
    await client.hello("rlmm")
    await client.call("configure", role="rsm", props=dict(BROKER_PROPS))
    await client.call("configure", role="rlmm", props=dict(BROKER_PROPS))
    md, contents = await tier(client, tmp_path)
    await client.close()
    first.stop()
    await asyncio.wait_for(task, 30)

    second = PluginServer(config, tmp_path / "serve.sock")
    task = await started(second)
    client = await BridgeClient.connect(second.socket_path)
    try:
        await client.hello("rlmm")
        await client.call("configure", role="rsm", props=dict(BROKER_PROPS))
        await client.call("configure", role="rlmm", props=dict(BROKER_PROPS))
        tp = wire_tp(md.topic_id_partition)
        await client.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
        await until_ready(client, tp)
        found = unwire(
            await client.call(
                "rlmm.remote_log_segment_metadata", topic_id_partition=tp, epoch=0, offset=1099
            )
        )
        assert found == md
        head = await client.call(
            "rsm.fetch_log_segment", metadata=wire(md), position=0, length=4096
        )
        assert head == contents["log_segment"][:4096]
    finally:
        await client.close()
        second.stop()
        await asyncio.wait_for(task, 30)


def _wait_exit(process: subprocess.Popen[bytes], timeout: float) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
        pytest.fail(f"rlmm serve did not exit within {timeout}s")


def _serve_cli(config: Path, sock: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``rlmm serve`` in a process; its output goes to ``<sock>.out``."""
    with sock.with_name(sock.name + ".out").open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rlmm.cli",
                "--config",
                str(config),
                "serve",
                "--socket",
                str(sock),
                *extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _output(sock: Path) -> str:
    return sock.with_name(sock.name + ".out").read_text()


def _wait_for(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"rlmm serve exited with {process.returncode}: {_output(path)}")
        assert time.monotonic() < deadline, f"rlmm serve never made {path}"
        time.sleep(0.05)


def test_the_command_exits_3_when_the_socket_is_served_and_0_when_the_broker_is_gone(
    tmp_path: Path,
) -> None:
    config, sock = write_config(tmp_path), tmp_path / "cli.sock"
    broker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    first = _serve_cli(config, sock, "--parent-pid", str(broker.pid))
    try:
        _wait_for(sock, first)
        second = _serve_cli(config, sock)
        assert _wait_exit(second, 30) == 3
        assert "another rlmm serve holds" in _output(sock)
        broker.kill()
        broker.wait(timeout=10)
        assert _wait_exit(first, 30) == 0
        assert not sock.exists()
        log = _output(sock)
        assert "listening on" in log and "is gone: stopping" in log
    finally:
        for p in (broker, first):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_sigterm_stops_the_command_cleanly(tmp_path: Path) -> None:
    config, sock = write_config(tmp_path), tmp_path / "term.sock"
    process = _serve_cli(config, sock)
    try:
        _wait_for(sock, process)
        os.kill(process.pid, signal.SIGTERM)
        assert _wait_exit(process, 30) == 0
        assert not sock.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


async def test_the_process_stops_once_the_last_open_class_closes(tmp_path: Path) -> None:
    """Kafka closes its RSM, then its RLMM: the first close leaves the process to the
    second, the second's close stops it (the socket file goes with it)."""
    server = PluginServer(write_config(tmp_path), tmp_path / "serve.sock", parent_pid=os.getpid())
    task = await started(server)
    rsm = await BridgeClient.connect(server.socket_path)
    rlmm = await BridgeClient.connect(server.socket_path)
    try:
        await rsm.hello("rsm")
        await rlmm.hello("rlmm")
        assert await rsm.call("close", role="rsm") == {"stopping": False, "open": ["rlmm"]}
        await asyncio.sleep(0.2)
        assert not task.done()
        assert (
            await rlmm.call(
                "rlmm.is_ready",
                topic_id_partition={"topic_id": bytes(16), "topic": "t", "partition": 0},
            )
            is False
        )
        assert await rlmm.call("close", role="rlmm") == {"stopping": True, "open": []}
        await asyncio.wait_for(task, 30)
        assert not server.socket_path.exists()
    finally:
        await rsm.close()
        await rlmm.close()
        if not task.done():
            server.stop()
            await asyncio.wait_for(task, 30)


async def test_sigterm_with_the_broker_alive_waits_for_its_classes_to_close(
    tmp_path: Path,
) -> None:
    """A broker's shutdown signals its whole process group: rlmm serve keeps answering
    until the broker's plugin classes close, then stops by itself."""
    config, sock = write_config(tmp_path), tmp_path / "grace.sock"
    broker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    process = _serve_cli(config, sock, "--parent-pid", str(broker.pid))
    try:
        await asyncio.to_thread(_wait_for, sock, process)
        client = await BridgeClient.connect(sock)
        try:
            await client.hello("rlmm")
            os.kill(process.pid, signal.SIGTERM)
            await asyncio.sleep(0.5)
            assert process.poll() is None
            tp = {"topic_id": bytes(16), "topic": "t", "partition": 0}
            assert await client.call("rlmm.is_ready", topic_id_partition=tp) is False
            assert (await client.call("close", role="rlmm"))["stopping"] is True
        finally:
            await client.close()
        assert await asyncio.to_thread(_wait_exit, process, 30) == 0
        assert "answering until the broker closes its plugin classes (rlmm)" in _output(sock)
    finally:
        for p in (broker, process):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


async def test_the_metrics_port_says_ready_once_configured_and_counts_in_kafkas_terms(
    tmp_path: Path,
) -> None:
    import urllib.error
    import urllib.request

    server = PluginServer(write_config(tmp_path), tmp_path / "m.sock", metrics_port=0)
    task = await started(server)
    assert server.metrics_port is not None
    base = f"http://127.0.0.1:{server.metrics_port.port}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    client = await BridgeClient.connect(server.socket_path)
    try:
        assert await asyncio.to_thread(get, "/healthz") == (200, "ok\n")
        status, body = await asyncio.to_thread(get, "/readyz")
        assert status == 503 and "no bridge has configured" in body
        await client.hello("rlmm")
        await client.call("configure", role="rsm", props=dict(BROKER_PROPS))
        await client.call("configure", role="rlmm", props=dict(BROKER_PROPS))
        md, contents = await tier(client, tmp_path)
        assert await asyncio.to_thread(get, "/readyz") == (200, "ok\n")
        await client.call("rsm.fetch_log_segment", metadata=wire(md), position=0, length=1000)
        _, metrics = await asyncio.to_thread(get, "/metrics")
        size = len(contents["log_segment"])
        assert f'rlmm_remote_copy_bytes_total{{topic="orders"}} {float(size)}' in metrics
        assert 'rlmm_remote_fetch_bytes_total{topic="orders"} 1000.0' in metrics
        assert 'rlmm_serve_info{version="' in metrics
        assert 'rlmm_serve_calls_total{method="rsm.copy_log_segment_data"} 1.0' in metrics
    finally:
        await client.close()
        server.stop()
        await asyncio.wait_for(task, 30)


async def test_a_sidecar_serve_outlives_the_classes_closing(serve: PluginServer) -> None:
    """Without --parent-pid (a container sidecar the bridge attaches to), the last
    class closing does not stop the process: its container's life is the pod's."""
    client = await BridgeClient.connect(serve.socket_path)
    try:
        await client.hello("rlmm")
        assert await client.call("close", role="rlmm") == {"stopping": False, "open": []}
    finally:
        await client.close()
    again = await BridgeClient.connect(serve.socket_path)
    try:
        assert (await again.hello("rsm"))["version"] == serve.version
    finally:
        await again.close()


async def test_a_manager_that_cannot_start_is_retried_and_said_not_ready(tmp_path: Path) -> None:
    """The metadata topic's cluster refuses connections: configure still answers (the
    broker's start is not held), every lookup is not_ready, /readyz names the cause,
    and the start is retried in the background until it works or the process stops."""
    from tests.fixtures.ports import free_port

    config = tmp_path / "rlmm.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[remote]\ntype = "local"\n')
    server = PluginServer(config, tmp_path / "refused.sock")
    task = await started(server)
    client = await BridgeClient.connect(server.socket_path)
    try:
        await client.hello("rlmm")
        props = {
            **BROKER_PROPS,
            "remote.log.metadata.common.client.bootstrap.servers": f"127.0.0.1:{free_port()}",
            "remote.log.metadata.initialization.retry.max.timeout.ms": "300",
        }
        await asyncio.wait_for(client.call("configure", role="rlmm", props=props), 10)
        tp = {"topic_id": bytes(16), "topic": "t", "partition": 0}
        deadline = time.monotonic() + 30
        while "could not start" not in server.metrics.readiness.state()[1]:
            assert time.monotonic() < deadline, server.metrics.readiness.state()
            await asyncio.sleep(0.1)
        assert await client.call("rlmm.is_ready", topic_id_partition=tp) is False
        with pytest.raises(CallError) as early:
            await client.call("rlmm.highest_offset_for_epoch", topic_id_partition=tp,
                              leader_epoch=0)  # fmt: skip
        assert early.value.kind == "not_ready"
    finally:
        await client.close()
        server.stop()
        await asyncio.wait_for(task, 30)


def test_the_brokers_environment_opens_the_metrics_port(tmp_path: Path) -> None:
    """RLMM_SERVE_METRICS_PORT in the broker's environment reaches the serve the bridge
    starts (and is not taken for an rlmm setting by the config loader)."""
    import urllib.request

    from tests.fixtures.ports import free_port

    config, sock, port = write_config(tmp_path), tmp_path / "env.sock", free_port()
    env = {**os.environ, "RLMM_SERVE_METRICS_PORT": str(port)}
    with sock.with_name(sock.name + ".out").open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlmm.cli", "--config", str(config), "serve", "--socket",
             str(sock)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        _wait_for(sock, process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert r.status == 200
        assert f"metrics on port {port}" in _output(sock)
    finally:
        process.terminate()
        assert _wait_exit(process, 30) == 0


async def test_a_listing_follows_each_segment_through_its_states(bridge: BridgeClient) -> None:
    """rlmm serve keeps a segment's encoded metadata per state for listings: each
    listing still gives the state the segment is in now, never an earlier one's bytes."""
    md = make_metadata(start_offset=0, size=100)
    tp = wire_tp(md.topic_id_partition)
    await bridge.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
    await until_ready(bridge, tp)

    async def listed() -> list[RemoteLogSegmentMetadata]:
        got = await bridge.call(
            "rlmm.list_remote_log_segments", topic_id_partition=tp, leader_epoch=None
        )
        return [unwire(m) for m in got["segments"]]  # type: ignore[misc]

    await bridge.call("rlmm.add_remote_log_segment_metadata", metadata=wire(md))
    assert await listed() == [md]
    finished = finished_update(md, b"custom")
    await bridge.call("rlmm.update_remote_log_segment_metadata", metadata=wire(finished))
    assert await listed() == [md.create_with_updates(finished)]
    deleting = RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id, md.event_timestamp_ms + 2, None,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 1,
    )  # fmt: skip
    await bridge.call("rlmm.update_remote_log_segment_metadata", metadata=wire(deleting))
    assert [m.state for m in await listed()] == [RemoteLogSegmentState.DELETE_SEGMENT_STARTED]


async def test_listings_and_writes_name_the_metadata_position_and_moves_are_pushed(
    serve: PluginServer, bridge: BridgeClient
) -> None:
    """The bridge keeps a listing while its metadata partition's offset holds: a listing
    names the position it reflects, a write answers the position once applied (before
    Kafka sees it done), and the RLMM connection is told each move unasked."""
    md = make_metadata(start_offset=0, size=100)
    tp = wire_tp(md.topic_id_partition)
    await bridge.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
    await until_ready(bridge, tp)
    before = await bridge.call(
        "rlmm.list_remote_log_segments", topic_id_partition=tp, leader_epoch=None
    )
    assert before["segments"] == []
    partition, offset = before["version"]
    written = await bridge.call("rlmm.add_remote_log_segment_metadata", metadata=wire(md))
    assert written[0] == partition and written[1] > offset
    after = await bridge.call(
        "rlmm.list_remote_log_segments", topic_id_partition=tp, leader_epoch=None
    )
    assert after["version"] == written and [unwire(m) for m in after["segments"]] == [md]

    async def pushed_offset() -> int:
        while True:
            push = await bridge.pushes.get()
            assert push["push"] == "applied"
            offsets = dict(push["offsets"])
            if offsets.get(partition, -1) >= written[1]:
                return int(offsets[partition])

    assert await asyncio.wait_for(pushed_offset(), 10) == written[1]
    # a write applied while the pusher waits out its coalescing interval is pushed too
    # (compared before each wait: no wake-up is lost between a push and the next wait)
    finished = finished_update(md, b"custom")
    again = await bridge.call("rlmm.update_remote_log_segment_metadata", metadata=wire(finished))
    written = again
    assert await asyncio.wait_for(pushed_offset(), 10) == again[1]
    # a partition not assigned here has no version: the bridge must not keep its answer
    other = wire_tp(new_tp("other"))
    with pytest.raises(CallError):
        await bridge.call(
            "rlmm.list_remote_log_segments", topic_id_partition=other, leader_epoch=None
        )


async def test_an_rsm_connection_is_pushed_nothing(
    serve: PluginServer, bridge: BridgeClient
) -> None:
    md = make_metadata(start_offset=0, size=100)
    tp = wire_tp(md.topic_id_partition)
    await bridge.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
    await until_ready(bridge, tp)
    rsm = await BridgeClient.connect(serve.socket_path)
    try:
        await rsm.hello("rsm")
        await bridge.call("rlmm.add_remote_log_segment_metadata", metadata=wire(md))
        await asyncio.wait_for(bridge.pushes.get(), 10)  # the RLMM's connection was told
        await asyncio.sleep(0.3)  # six push intervals
        assert rsm.pushes.empty()
    finally:
        await rsm.close()
