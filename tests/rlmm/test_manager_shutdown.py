"""Nothing hangs at shutdown: managers closed or forgotten, on every event log backend.

A manager owns the event log it starts (``close()`` closes it). A program that
forgets ``close()`` still ends: when ``asyncio.run`` cancels the leftover tasks, no
task of ours (or of aiokafka, which swallows a first cancellation in its fetch task)
keeps the loop alive. Each case runs in a child process, so a hang is a failed test
(killed after a deadline), not a stuck suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 30  # generous on a loaded 2-core machine; a hang never ends


WORKER = [sys.executable, "-W", "error", "-m", "tests.rlmm.shutdown_worker"]


def run_worker(backend: str, where: str, mode: str) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            [*WORKER, backend, where, mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"asyncio.run did not return within {DEADLINE_S}s ({backend}, {mode}): {e}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RETURNED" in result.stdout
    return result


@pytest.mark.parametrize("mode", ["close", "unclosed"])
def test_memory_backend_ends(mode: str) -> None:
    run_worker("memory", "-", mode)


@pytest.mark.parametrize("mode", ["close", "unclosed"])
def test_file_backend_ends(mode: str, tmp_path: Path) -> None:
    run_worker("file", str(tmp_path), mode)


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["close", "unclosed"])
def test_kafka_backend_ends(mode: str, kafka_bootstrap: str) -> None:
    result = run_worker("kafka", kafka_bootstrap, mode)
    if mode == "close":
        # Closed managers close their logs: nothing is left for the loop to clean up.
        assert "was not closed" not in result.stderr
        assert "Unclosed" not in result.stderr, result.stderr[-3000:]
