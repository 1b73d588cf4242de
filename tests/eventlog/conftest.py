"""Event log fixtures: ``make_log`` builds a started log of the backend under test.

Invariant: every contract test runs once per backend (memory, file, and Kafka on each
broker of tests/fixtures/kafka.py: Tansu and Apache Kafka); a Kafka case skips with a
reason when its broker cannot be had (see the fixture for when it fails instead).
Every log a test opens is closed after it, so no test leaks a writer or a lock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from uuid import uuid4

import pytest

from eventlog import EventLog
from eventlog.file import FileEventLog
from eventlog.memory import MemoryEventLog
from tests.fixtures.kafka import KAFKA_BROKERS, bootstrap_for

MakeLog = Callable[..., Awaitable[EventLog]]

BACKENDS = [
    "memory",
    "file",
    *(
        pytest.param(f"kafka-{p.values[0]}", marks=p.marks, id=f"kafka-{p.values[0]}")
        for p in KAFKA_BROKERS
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_log(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[MakeLog]:
    """``await make_log(partitions=3)``: a started log; calling it again reopens the same
    storage (same dir / topic), which is how durability is tested."""
    opened: list[EventLog] = []
    bootstrap = ""
    topic = f"rlmm-contract-{uuid4().hex[:8]}"
    if backend.startswith("kafka-"):
        bootstrap = bootstrap_for(backend.removeprefix("kafka-"), request)

    async def make(partitions: int = 3) -> EventLog:
        log: EventLog
        if backend == "memory":
            log = MemoryEventLog(partitions)
        elif backend == "file":
            log = FileEventLog(tmp_path / "eventlog", partitions)
        else:
            from eventlog.kafka import KafkaEventLog, KafkaLogSettings

            # One broker on loopback: replication factor 1 (Apache Kafka refuses 3).
            log = KafkaEventLog(
                bootstrap_servers=bootstrap,
                partitions=partitions,
                settings=KafkaLogSettings(topic=topic, replication_factor=1),
            )
        opened.append(log)
        await log.start()
        return log

    yield make
    for log in opened:
        await log.close()


async def collect(
    log: EventLog, partition: int, start: int, count: int, timeout: float = 20.0
) -> list[tuple[int, bytes]]:
    """The first ``count`` records read from ``start`` (fails, not hangs, on a stall)."""
    out: list[tuple[int, bytes]] = []
    if count == 0:
        return out
    records = log.read(partition, start)
    try:
        async with asyncio.timeout(timeout):
            async for record in records:
                out.append(record)
                if len(out) == count:
                    break
    finally:
        await aclose(records)
    return out


async def aclose(iterator: object) -> None:
    """Close an async generator now (not at garbage collection, after the loop is gone)."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def run_and_sigkill(script: Path, args: list[str], run_for: float) -> list[str]:
    """Run a writer child until it prints ``ready``, let it work ``run_for`` s, SIGKILL it.

    Returns its whole stdout lines (the last piece is "" or a line cut by the kill, so
    it is dropped: never an acknowledgement).
    """
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert child.stdout is not None and child.stderr is not None
    ready = await asyncio.wait_for(child.stdout.readline(), 30)
    assert ready == b"ready\n", (ready, await child.stderr.read())
    # Drain stdout while it runs so the child never blocks on a full pipe.
    output = asyncio.create_task(child.stdout.read())
    await asyncio.sleep(run_for)
    child.send_signal(signal.SIGKILL)
    lines = (await output).decode().split("\n")
    errors = await child.stderr.read()
    assert await child.wait() == -signal.SIGKILL, errors.decode()
    return lines[:-1]
