"""The `rlmm offload` sidecar: scanning log dirs, settings, signals, metrics, snapshots."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from remote.local import LocalRemoteStorageManager
from remote.segments import PartitionDir
from rlmm.config import load_config
from rlmm.errors import ConfigError
from rlmm.factory import create_manager, open_event_log
from rlmm.offload import OffloadSettings
from rlmm.offload.display import Display
from rlmm.offload.sidecar import run_sidecar
from tests.fixtures.ports import free_port
from tests.rlmm.offload.conftest import check_invariants, local_keys, write_partition


def write_config(tmp: Path, extra: str = "") -> Path:
    path = tmp / "offload.toml"
    path.write_text(
        f"""
data_dir = "{tmp / "data"}"
[eventlog]
partitions = 4
fsync = "interval"
[offload]
"retention.ms" = -1
"remote.log.manager.task.interval.ms" = 200
{extra}
"""
    )
    return path


def log_dir(tmp: Path) -> tuple[Path, list[PartitionDir], PartitionDir]:
    logs = tmp / "kafka-logs"
    pdirs = [
        write_partition(logs, "orders", 0, codec="gzip"),
        write_partition(logs, "orders", 1),
        write_partition(logs, "clicks", 0, epochs=(1,), aborted_txn=False),
    ]
    write_partition(logs, "__consumer_offsets", 0)  # internal: never offloaded
    audit = write_partition(logs, "audit", 0)  # disabled in some tests
    nameless = write_partition(logs, "legacy", 0)
    (nameless.path / "partition.metadata").unlink()  # no topic id: skipped, one warning
    (logs / "orders-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    return logs, pdirs, audit


async def check_store(
    config_path: Path, pdirs: list[PartitionDir], *, complete: bool = True
) -> None:
    config = load_config(config_path, env={})
    manager = create_manager(config, open_event_log(config))
    await manager.start()
    rsm = LocalRemoteStorageManager(config.data_dir / "remote")
    try:
        tps = [p.topic_id_partition() for p in pdirs]
        await manager.on_partition_leadership_changes([], tps)
        await manager.wait_until_ready(tps, 30)
        live = check_invariants(manager, rsm, pdirs, local_keys(rsm.root))
        expected = sum(len(p.segments()) - 1 for p in pdirs)
        assert len(live) == expected if complete else 0 < len(live) <= expected
    finally:
        await manager.close()
        rsm.close()


async def test_once_offloads_what_it_should(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs, pdirs, _audit = log_dir(tmp_path)
    path = write_config(tmp_path, '[offload.topics.audit]\n"remote.storage.enable" = false\n')
    config = load_config(path, env={})
    caplog.set_level(logging.INFO)
    report = await run_sidecar(config, [logs], once=True, display=Display(rich=False))
    assert report.partitions == 3 and report.rounds == 1
    assert report.tally.copied == sum(len(p.segments()) - 1 for p in pdirs)
    assert report.tally.errors == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "legacy-0" in warnings[0] and "topic id" in warnings[0]
    assert any("copied orders-0" in r.getMessage() for r in caplog.records)  # plain log lines
    assert list((config.data_dir / "snapshots").iterdir()), "no snapshot written"
    await check_store(path, pdirs)
    again = await run_sidecar(config, [logs], once=True, display=Display(rich=False))
    assert again.tally.copied == 0  # restarted from the snapshot: nothing copied twice


async def test_the_restores_progress_topic_is_never_offloaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`rlmm restore` keeps its progress in ``__rlmm_restore`` of the target cluster: a
    sidecar beside one of its brokers skips it as it skips Kafka's internal topics (it
    counted it among its partitions: "round 1 over 11 partitions", issue 46)."""
    from rlmm.restore import PROGRESS_TOPIC

    logs, _pdirs, _audit = log_dir(tmp_path)
    progress = [write_partition(logs, PROGRESS_TOPIC, p) for p in range(3)]
    config = load_config(write_config(tmp_path), env={})
    assert not OffloadSettings.from_config(config).offloads(PROGRESS_TOPIC)
    caplog.set_level(logging.INFO)
    report = await run_sidecar(config, [logs], once=True, display=Display(rich=False))
    assert report.partitions == 4  # orders-0, orders-1, clicks-0, audit-0
    assert any("round 1 over 4 partitions" in r.getMessage() for r in caplog.records)
    copied = local_keys(config.data_dir / "remote")
    assert copied and not [k for k in copied if PROGRESS_TOPIC in k]
    assert not [r for r in caplog.records if progress[0].path.name in r.getMessage()]


def test_offload_settings_and_overrides(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        '"retention.bytes" = 1000\n[offload.topics."a.b"]\n"retention.ms" = 5\n',
    )
    settings = OffloadSettings.from_config(
        load_config(path, env={"RLMM_OFFLOAD_REMOTE_LOG_MANAGER_COPIER_THREAD_POOL_SIZE": "2"})
    )
    assert settings.copier_concurrency == 2 and settings.task_interval_ms == 200
    assert settings.retention_for("x").retention_bytes == 1000
    assert settings.retention_for("a.b").retention_ms == 5
    assert settings.retention_for("a.b").retention_bytes == 1000
    assert not settings.offloads("__consumer_offsets")
    with pytest.raises(ConfigError, match=r"offload\.retention\.typo"):
        load_config(write_config(tmp_path, '"retention.typo" = 1\n'), env={})
    with pytest.raises(ConfigError, match=r"offload.topics.t.retention.ms must be"):
        load_config(write_config(tmp_path, '[offload.topics.t]\n"retention.ms" = "soon"\n'), env={})


@pytest.mark.slow
def stopped_by_signal(proc: subprocess.Popen[str]) -> None:
    """Wait (60 s at most, then SIGKILL) for a signalled sidecar: it exits 0, saying it
    was stopped by a signal, with no traceback."""
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped by signal" in out and "Traceback" not in err


def test_sigterm_finishes_writes_snapshot_and_exits_0(tmp_path: Path) -> None:
    logs, pdirs, audit = log_dir(tmp_path)
    pdirs.append(audit)
    path = write_config(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "rlmm"),
            "offload",
            "--config",
            str(path),
            "--log-dir",
            str(logs),
            "--metrics-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        body = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                body = (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
                    .read()
                    .decode()
                )
            except OSError:
                body = ""
            if 'rlmm_offload_partition_rounds_total{kind="expire"}' in body:
                break
            time.sleep(0.2)
        for name in (
            "rlmm_remote_copy_bytes_total",
            "rlmm_remote_copy_requests_total",
            "rlmm_remote_copy_lag_bytes",
            "rlmm_remote_copy_lag_segments",
            "rlmm_remote_log_size_bytes",
            "rlmm_remote_log_metadata_count",
            "rlmm_metadata_event_log_lag",
        ):
            assert name in body, f"{name} missing from /metrics"
        proc.send_signal(signal.SIGTERM)
    finally:
        stopped_by_signal(proc)
    assert list((tmp_path / "data" / "snapshots").iterdir())
    import asyncio

    # stopped mid-round: what was copied is whole, nothing is left STARTED
    asyncio.run(check_store(path, pdirs, complete=False))


def test_cli_once_plain_output(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rlmm.cli import main

    logs, pdirs, audit = log_dir(tmp_path)
    pdirs.append(audit)
    path = write_config(tmp_path)
    result = CliRunner().invoke(
        main, ["offload", "--config", str(path), "--log-dir", str(logs), "--once"]
    )
    assert result.exit_code == 0, result.output
    assert f"{sum(len(p.segments()) - 1 for p in pdirs)} segments copied" in result.output
    missing = CliRunner().invoke(
        main, ["offload", "--config", str(path), "--log-dir", str(tmp_path / "nope"), "--once"]
    )
    assert missing.exit_code == 2 and "nope" in missing.output


def test_the_sidecar_logs_the_librarys_warnings(tmp_path: Path) -> None:
    """A daemon's log is all an operator sees: a snapshot the manager cannot use (here
    truncated) is named on the sidecar's stderr, though the one-shot commands print
    only their one error line."""
    logs, _, _ = log_dir(tmp_path)
    path = write_config(tmp_path)
    command = [str(Path(sys.executable).parent / "rlmm"), "offload", "--config", str(path),
               "--log-dir", str(logs), "--once"]  # fmt: skip
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    snapshots = [p for p in (tmp_path / "data" / "snapshots").rglob("*") if p.is_file()]
    assert snapshots
    for snap in snapshots:
        snap.write_bytes(snap.read_bytes()[:20])
    second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    warned = [line for line in second.stderr.splitlines() if " WARNING snapshot" in line]
    assert warned and any(str(snap) in line for line in warned for snap in snapshots), second.stderr


STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "


def test_every_line_of_the_sidecar_carries_the_time(tmp_path: Path) -> None:
    """Under nohup the sidecar's lines had no time, and a failover could not be timed
    (issue 46): every log line carries it, in `rlmm serve`'s format, and so does the
    error line it stops on; a one-shot command's error line stays as it was."""
    import re

    logs, _pdirs, _audit = log_dir(tmp_path)
    path = write_config(tmp_path)
    rlmm = str(Path(sys.executable).parent / "rlmm")
    done = subprocess.run(
        [rlmm, "offload", "--once", "--config", str(path), "--log-dir", str(logs)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any(" INFO rlmm.offload.sidecar: rlmm offload: node " in line for line in lines)
    assert any(" WARNING rlmm.offload.logdir: skipping " in line for line in lines)
    untimed = [line for line in lines if not re.match(STAMP + r"(INFO|WARNING|ERROR) \S+: ", line)]
    assert lines and not untimed, untimed
    with socket.socket() as held:  # the sidecar stops on its metrics port
        held.bind(("127.0.0.1", 0))
        held.listen()
        stopped = subprocess.run(
            [rlmm, "offload", "--config", str(path), "--log-dir", str(logs),
             "--metrics-port", str(held.getsockname()[1])],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert stopped.returncode == 2
    assert re.fullmatch(STAMP + r"error: --metrics-port: .*\n", stopped.stderr), stopped.stderr
    one_shot = subprocess.run(
        [rlmm, "segments", "list", "--config", str(path), "--set", "eventlog.partitons=1"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert one_shot.stderr.startswith("error: unknown setting eventlog.partitons"), one_shot.stderr


async def test_rich_progress_on_a_terminal(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    logs, _pdirs, _audit = log_dir(tmp_path)
    buffer = io.StringIO()
    display = Display(console=Console(file=buffer, force_terminal=True, width=120))
    assert display.rich
    config = load_config(write_config(tmp_path), env={})
    report = await run_sidecar(config, [logs], once=True, display=display)
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buffer.getvalue())
    assert f"offload {report.tally.copied} segments" in text
    assert "round 1 over 4 partitions (4 led): " in text
    assert "; since start: " in text


@pytest.mark.slow
def test_second_signal_abandons_uploads_cleanly(tmp_path: Path) -> None:
    logs = tmp_path / "kafka-logs"
    pdirs = [
        write_partition(logs, "big", p, records=4000, value_size=2000, segment_bytes=1 << 20)
        for p in range(3)
    ]
    path = write_config(tmp_path, '"remote.log.manager.copier.thread.pool.size" = 3\n')
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "rlmm"),
            "offload",
            "--config",
            str(path),
            "--log-dir",
            str(logs),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "copied big-" in line:
                break
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
    finally:
        stopped_by_signal(proc)
    import asyncio

    asyncio.run(check_store(path, pdirs, complete=False))


def test_sigterm_while_the_metadata_log_is_unreachable_exits_0_at_once(tmp_path: Path) -> None:
    """The manager's start waits for a Kafka metadata log that accepts connections but
    does not answer (a broker starting) up to Kafka's initialization timeout (30 s here,
    minutes by default): a stop must not, or an orchestrator's grace period ends in
    SIGKILL."""
    logs = tmp_path / "kafka-logs"
    write_partition(logs, "orders", 0)
    silent = socket.socket()  # accepts into its backlog, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    path = tmp_path / "offload.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[eventlog]\ntype = "kafka"\n'
        f'bootstrap_servers = "127.0.0.1:{silent.getsockname()[1]}"\n'
        '[offload]\n"retention.ms" = -1\n'
    )
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "rlmm"), "offload", "--config", str(path),
         "--log-dir", str(logs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "rlmm offload: node" in line:  # the startup line: the start is under way
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
    finally:
        stopped_by_signal(proc)
        silent.close()
    took = time.monotonic() - signalled
    assert took < 15, f"stopped {took:.1f} s after SIGTERM: it waited for the metadata log"


def test_a_refused_metadata_bootstrap_fails_as_fast_as_the_cli(tmp_path: Path) -> None:
    """Nothing listens at the Kafka event log's bootstrap: the sidecar said so after
    30 s (Kafka's initialization wait; 5 s in the read-only commands: issue 46). A
    connection refused is not a broker starting slowly: it fails within the refused
    wait (5 s), in one error line naming the address and the setting. (The bound is a
    hang guard: before the change this took 30 s.)"""
    logs = tmp_path / "kafka-logs"
    write_partition(logs, "orders", 0)
    port = free_port()  # nothing listens there
    path = tmp_path / "offload.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        f'[eventlog]\ntype = "kafka"\nbootstrap_servers = "127.0.0.1:{port}"\n'
    )
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rlmm"), "offload", "--config", str(path),
         "--log-dir", str(logs)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "error: " in ln]
    assert f"127.0.0.1:{port} refused the connection" in line, line
    assert "nothing listens there" in line and "refused_timeout_ms" in line, line
    assert took < 10, f"the sidecar took {took:.1f} s to give up on a refused bootstrap"


def test_a_log_dir_that_is_not_one_is_named(tmp_path: Path) -> None:
    """A partition dir, or a dir with no partition dir, given as --log-dir: a warning
    naming what was expected, and with --once exit 1 (it used to report success)."""
    import subprocess
    import sys

    from rlmm.offload.logdir import log_dir_problem

    logs = tmp_path / "kafka-logs"
    (logs / "orders-0").mkdir(parents=True)
    (logs / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    assert log_dir_problem(logs) is None
    assert "looks like a partition dir" in str(log_dir_problem(logs / "orders-0"))
    assert "holds no partition dir" in str(log_dir_problem(tmp_path / "empty"))
    for wrong, expected in ((logs / "orders-0", f"({logs}?)"), (tmp_path / "empty", "log.dirs")):
        done = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "offload", "--once", "--log-dir", str(wrong),
             "--set", f"data_dir={tmp_path / 'rlmm'}", "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert expected in done.stderr
        assert json.loads(done.stdout)["warnings"] and expected in done.stdout


async def test_startup_line_and_metrics_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One startup summary (config, store, event log, log dirs, metrics address, the
    defaults in effect), secrets redacted; the metrics port binds the address asked."""
    import logging

    from rlmm.config import load_config
    from rlmm.offload.metrics import OffloadMetrics
    from rlmm.offload.sidecar import Sidecar

    config = load_config(None, overrides={"data_dir": str(tmp_path)}, env={})
    sidecar = Sidecar(config, [tmp_path / "logs"], metrics_port=9308, metrics_host="0.0.0.0")
    line = sidecar.startup_summary()
    for part in ("config defaults", f"root={tmp_path / 'remote'}", "event log file",
                 f"log dirs {tmp_path / 'logs'}", "metrics http://0.0.0.0:9308/metrics",
                 "no config file: embedded defaults", "retention.ms 604800000"):  # fmt: skip
        assert part in line, (part, line)
    secret = load_config(
        None,
        overrides={"data_dir": str(tmp_path), "remote.type": "s3", "remote.bucket": "b",
                   "remote.aws_secret_access_key": "never-shown-31337"},
        env={},
    )  # fmt: skip
    assert "never-shown-31337" not in Sidecar(secret, [tmp_path]).startup_summary()
    server = OffloadMetrics().serve(0, "0.0.0.0")
    try:
        assert server.host == "0.0.0.0"
    finally:
        server.close()
    (tmp_path / "logs").mkdir()
    with caplog.at_level(logging.INFO, logger="rlmm.offload.sidecar"):
        await run_sidecar(config, [tmp_path / "logs"], once=True, display=Display(rich=False))
    started = "rlmm offload: node 0 (from broker_id"
    assert any(r.getMessage().startswith(started) for r in caplog.records)


async def test_rounds_count_rounds_and_counters_start_at_zero(tmp_path: Path) -> None:
    """rlmm_offload_rounds_total counts rounds (it counted partition runs); every led
    topic's counters have a sample at 0 before its first copy error or delete."""
    from prometheus_client import generate_latest

    from rlmm.offload.sidecar import Sidecar

    logs, pdirs, _audit = log_dir(tmp_path)
    path = write_config(tmp_path, '[offload.topics.audit]\n"remote.storage.enable" = false\n')
    sidecar = Sidecar(load_config(path, env={}), [logs], once=True, display=Display(rich=False))
    report = await sidecar.run()
    body = generate_latest(sidecar.metrics.registry).decode()
    assert report.rounds == 1 and "rlmm_offload_rounds_total 1.0" in body
    runs = len(pdirs)  # orders-0, orders-1, clicks-0 (audit is not offloaded)
    assert f'rlmm_offload_partition_rounds_total{{kind="copy"}} {float(runs)}' in body
    assert 'rlmm_remote_copy_errors_total{topic="orders"} 0.0' in body
    assert "rlmm_remote_storage_paused_seconds_total 0.0" in body
    assert 'rlmm_remote_delete_requests_total{topic="orders"} 0.0' in body


def test_metrics_port_in_use_names_the_address(tmp_path: Path) -> None:
    """A --metrics-port another process holds: exit 2, one line naming host and port."""
    import socket

    logs, _pdirs, _audit = log_dir(tmp_path)
    path = write_config(tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "offload", "--once", "--config", str(path),
             "--log-dir", str(logs), "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if " error: " in ln]
    assert f"127.0.0.1:{port}" in line and "--metrics-port" in line, line
    assert "Traceback" not in done.stderr


async def test_the_metadata_lag_is_published_before_a_long_first_round_ends(
    tmp_path: Path,
) -> None:
    """A restarted sidecar's first round over a backlog can take minutes: its metadata
    lag gauge is set before that round, not only after it (a dashboard showed no lag
    for a sidecar in its first round)."""
    import asyncio

    from prometheus_client import generate_latest

    from rlmm.offload.sidecar import Sidecar

    logs = tmp_path / "kafka-logs"
    for p in range(3):  # about 12 MB of backlog
        write_partition(logs, "big", p, records=2000, value_size=2000, segment_bytes=1 << 20)
    path = write_config(tmp_path)
    sidecar = Sidecar(load_config(path, env={}), [logs], display=Display(rich=False))
    task = asyncio.create_task(sidecar.run())
    try:
        body = ""
        for _ in range(600):
            await asyncio.sleep(0.02)
            body = generate_latest(sidecar.metrics.registry).decode()
            if "rlmm_metadata_event_log_lag{" in body or task.done():
                break
        assert "rlmm_metadata_event_log_lag{" in body
        # no round has completed yet
        assert "rlmm_offload_last_good_round_timestamp_seconds 0.0" in body
    finally:
        sidecar.stop()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 60)
