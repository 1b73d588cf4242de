"""The suite's xdist groups (tests/fixtures/workers.py): a test reaching the session's
Apache Kafka broker, directly or through an "apache" parameter, is in its group; and
the installed pytest and pytest-xdist do send a group's tests to one worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.fixtures.workers import group_of


def item(fixtures: tuple[str, ...], **params: str) -> Any:
    return SimpleNamespace(fixturenames=fixtures, callspec=SimpleNamespace(params=params))


def test_groups() -> None:
    assert group_of(item(("tmp_path", "apache_kafka"))) == "apache-kafka-broker"
    assert group_of(item(("apache_kafka_cluster", "apache_kafka"))) == "apache-kafka-cluster"
    # fixtures that ask for the broker at run time, by parameter
    assert group_of(item(("kafka_bootstrap",), kafka_flavor="apache")) == "apache-kafka-broker"
    assert group_of(item(("make_log",), backend="kafka-apache")) == "apache-kafka-broker"
    assert group_of(item(("kafka_bootstrap",), kafka_flavor="tansu")) is None
    assert group_of(item(("make_log",), backend="file")) is None
    assert group_of(SimpleNamespace(fixturenames=("tmp_path",))) is None


def test_loadgroup_sends_a_groups_tests_to_one_worker(tmp_path: Path) -> None:
    # pytest 9.2 with pytest-xdist 3.8 spreads them: every group's session fixtures
    # (brokers, the short soak) then start once per worker.
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_grouped.py").write_text(
        "import os, pathlib, time, pytest\n"
        + "".join(
            f"@pytest.mark.xdist_group('g')\ndef test_{n}():\n    time.sleep(0.2)\n"
            f"    pathlib.Path({str(tmp_path)!r}, 'ran-{n}').write_text("
            "os.environ['PYTEST_XDIST_WORKER'])\n"
            for n in "abcd"
        )
        + "".join(f"def test_other_{n}():\n    time.sleep(0.2)\n" for n in "abcd")
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", str(tests)],
        capture_output=True, text=True, timeout=120, cwd=tests,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {p.read_text() for p in tmp_path.glob("ran-*")}
    assert len(list(tmp_path.glob("ran-*"))) == 4 and len(workers) == 1, workers
