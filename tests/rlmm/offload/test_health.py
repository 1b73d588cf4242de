"""The sidecar's metrics port: /metrics, /healthz, /readyz and 404 for the rest.

Invariant checked: /healthz answers 200 while the process serves; /readyz answers 200
only after a round that completed without error (and with the metadata caught up),
503 with a one-line reason otherwise; the port closes with the sidecar, idempotently.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from rlmm.offload.health import NOT_STARTED
from rlmm.offload.metrics import OffloadMetrics
from tests.fixtures.ports import free_port
from tests.rlmm.offload.conftest import write_partition
from tests.rlmm.offload.test_sidecar import log_dir, write_config


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET; an HTTP error status is an answer too."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def spawn_offload(config: Path, logs: Path, port: int) -> subprocess.Popen[str]:
    """`rlmm offload` over ``logs`` serving its metrics port on 127.0.0.1:``port``;
    the caller stops it (``stop``)."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "rlmm"), "offload", "--config", str(config),
         "--log-dir", str(logs), "--metrics-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def stop(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` if it still runs, and close its pipes (a failed test leaks none)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def wait_for(
    what: str, check: Callable[[], bool], proc: subprocess.Popen[str] | None, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            _out, err = proc.communicate()
            pytest.fail(f"sidecar exited ({proc.returncode}) before {what}: {err[-2000:]}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_endpoints_and_readiness_transitions() -> None:
    """Before any round: 503 'starting'; a good round: 200; a failed round: 503 with
    its reason in one line; the next good round: 200 again. close() twice is fine."""
    metrics = OffloadMetrics()
    server = metrics.serve(0, "127.0.0.1")
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(f"{base}/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
        assert get(f"{base}/readyz") == (503, "text/plain; charset=utf-8", NOT_STARTED + "\n")
        status, ctype, body = get(f"{base}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=")
        assert "rlmm_offload_ready 0.0" in body
        assert "rlmm_offload_last_round_completed_timestamp_seconds 0.0" in body
        for path in ("/", "/metricsx", "/healthz/x", "/favicon.ico"):
            status, _ctype, body = get(base + path)
            assert status == 404, path
            assert body == f"not found: {path} (this port serves /metrics, /healthz, /readyz)\n"

        metrics.readiness.round_completed(None)
        assert get(f"{base}/readyz")[::2] == (200, "ok\n")
        assert "rlmm_offload_ready 1.0" in get(f"{base}/metrics")[2]
        metrics.readiness.round_completed("last round failed:\n  S3 said\tno")
        assert get(f"{base}/readyz")[::2] == (503, "last round failed: S3 said no\n")
        assert "rlmm_offload_ready 0.0" in get(f"{base}/metrics")[2]
        metrics.readiness.round_completed(None)
        assert get(f"{base}/readyz")[0] == 200
        metrics.readiness.not_ready("stopping (signal received)")
        assert get(f"{base}/readyz")[::2] == (503, "stopping (signal received)\n")
        head = urllib.request.Request(f"{base}/healthz", method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as r:
            assert r.status == 200 and r.read() == b""
    finally:
        server.close()
        server.close()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)


def test_metadata_behind_a_round_ago_is_not_ready() -> None:
    """A transient lag is no problem; events published before the previous round ended
    and still not applied are."""
    readiness = OffloadMetrics().readiness
    assert readiness.metadata_problem({0: 10}, {0: 14}) is None  # first look: nothing to say
    assert readiness.metadata_problem({0: 13}, {0: 20}) is None  # caught up to the last look
    problem = readiness.metadata_problem({0: 13, 1: 3}, {0: 20, 1: 4})
    assert problem is not None
    assert "partition 0 applied offset 13, events up to 19" in problem and "\n" not in problem


@pytest.mark.slow
def test_real_sidecar_probes(tmp_path: Path) -> None:
    """`rlmm offload` on a temp log dir: /healthz at once, /readyz 200 after a round,
    503 naming the partition while its copies fail, 200 once they succeed again; the
    port is closed when the sidecar exits on SIGTERM."""
    logs, _pdirs, _audit = log_dir(tmp_path)
    path = write_config(tmp_path)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = spawn_offload(path, logs, port)
    remote = tmp_path / "data" / "remote"
    try:
        wait_for("/healthz", lambda: get(f"{base}/healthz")[::2] == (200, "ok\n"), proc)
        wait_for("/readyz 200", lambda: get(f"{base}/readyz")[0] == 200, proc)
        body = get(f"{base}/metrics")[2]
        assert "rlmm_offload_ready 1.0" in body
        assert "rlmm_offload_task_interval_seconds 0.2" in body
        assert get(f"{base}/")[0] == 404

        # The store breaks (its root is now a file) and a new partition appears.
        remote.rename(tmp_path / "remote.saved")
        remote.write_text("not a directory")
        write_partition(logs, "fresh", 0)
        reason: list[str] = []

        def failing() -> bool:
            status, _ctype, text = get(f"{base}/readyz")
            reason[:] = [text]
            return status == 503

        wait_for("/readyz 503", failing, proc)
        assert reason[0].startswith("last round failed: fresh-0"), reason
        assert reason[0].endswith("\n") and reason[0].count("\n") == 1
        assert get(f"{base}/healthz")[0] == 200  # alive all the same

        remote.unlink()
        (tmp_path / "remote.saved").rename(remote)
        wait_for("/readyz 200 again", lambda: get(f"{base}/readyz")[0] == 200, proc)

        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
        if remote.is_file():
            remote.unlink()
        if (tmp_path / "remote.saved").exists():
            shutil.move(tmp_path / "remote.saved", remote)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)
