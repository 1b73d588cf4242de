"""Managers in separate processes over one Kafka topic (Tansu): convergence and crash restart.

- Three worker processes (tests/integration/manager_worker.py), each leading its own
  user partitions (mostly on different metadata partitions, one deliberately shared
  between two workers) and all following one shared partition, write concurrently;
  afterwards every process's state for its partitions equals a sequential replay of
  the topic read by an independent raw consumer.
- A worker with snapshots is SIGKILLed mid-workload; a new manager resumes from its
  newest snapshot, replays only the records after it, loses no acknowledged write
  and ends in the state of a full replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.codec import decode
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentState, TopicIdPartition
from rlmm.partitioning import metadata_partition_for
from rlmm.snapshotting import SnapshotPolicy
from snapshot import SnapshotStore
from tests.integration.kafka_replay import (
    digest,
    read_topic,
    replay,
    tp_to_json,
    unmet_acknowledged,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FETCH_MAX_WAIT_MS = 20  # see test_manager_kafka.py: Tansu does not wake long polls


class Worker:
    """One manager_worker child: lines in on stdin, lines out collected by a reader task."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr_path: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self.acks: list[bytes] = []
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(cls, spec: dict[str, Any], stderr_path: Path) -> Worker:
        with stderr_path.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.integration.manager_worker",
                json.dumps(spec),
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        return cls(proc, stderr_path)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode().rstrip("\n")
            if line.startswith("ACK "):
                self.acks.append(bytes.fromhex(line[4:]))
            else:
                self.lines.put_nowait(line)
        self.lines.put_nowait(None)

    async def expect(self, word: str, timeout: float = 60.0) -> str:
        """The rest of the next non-ACK line, which must start with ``word``."""
        line = await asyncio.wait_for(self.lines.get(), timeout)
        if line is None or not line.startswith(word):
            await asyncio.wait_for(self.proc.wait(), 10)
            pytest.fail(
                f"worker pid {self.proc.pid} said {line!r} (exit {self.proc.returncode}), "
                f"expected {word}; stderr tail:\n{self.stderr_tail()}"
            )
        return line[len(word) :].strip()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.stderr_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    async def stop(self, sig: int | None = signal.SIGKILL) -> int:
        """Send ``sig`` (None: just wait for the exit), reap the process, return its code."""
        if sig is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 20)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._reader, 10)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return code


def spec(bootstrap: str, topic: str, partitions: int, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap": bootstrap,
        "topic": topic,
        "partitions": partitions,
        "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
        "followers": [],
        **extra,
    }


def pick(topic: str, n: int, avoid: set[int], want: int | None = None) -> TopicIdPartition:
    """A user partition of a fresh topic whose metadata partition is ``want`` / not in ``avoid``."""
    topic_id = uuid4()
    for partition in range(10_000):
        candidate = TopicIdPartition(topic_id, topic, partition)
        p = metadata_partition_for(candidate, n)
        if (want is None and p not in avoid) or p == want:
            return candidate
    raise AssertionError("no user partition maps where wanted")  # 10k tries: not reachable


def segment_states(
    manager: TopicBasedRemoteLogMetadataManager, tps: list[TopicIdPartition]
) -> dict[RemoteLogSegmentId, RemoteLogSegmentState]:
    return {
        s.remote_log_segment_id: s.state for t in tps for s in manager.list_remote_log_segments(t)
    }


async def test_managers_in_three_processes_converge_to_the_replay(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    n = 8
    topic = f"rlmm-procs-{uuid4().hex[:8]}"
    taken: set[int] = set()

    def own(name: str, want: int | None = None) -> TopicIdPartition:
        t = pick(name, n, taken, want)
        taken.add(metadata_partition_for(t, n))
        return t

    shared = own("shared")
    leaders = [
        [shared, own("w0"), own("w0")],
        [own("w1"), own("w1")],
        [own("w2")],
    ]
    # Two processes writing concurrently to one metadata partition as well.
    leaders[2].append(own("w2", want=metadata_partition_for(leaders[1][0], n)))
    workers: list[Worker] = []
    try:
        workers = await asyncio.gather(
            *(
                Worker.spawn(
                    spec(
                        kafka_bootstrap,
                        topic,
                        n,
                        leaders=[tp_to_json(t) for t in mine],
                        followers=[] if k == 0 else [tp_to_json(shared)],
                        lifecycles=25,
                        seed=k,
                    ),
                    tmp_path / f"worker-{k}.err",
                )
                for k, mine in enumerate(leaders)
            )
        )
        for w in workers:
            assert await w.expect("READY") == ""
        for w in workers:
            w.send("GO")
        done = [int(await w.expect("DONE")) for w in workers]
        for w in workers:
            w.send("STATE")
        states = [json.loads(await w.expect("STATE")) for w in workers]
        assert [await w.stop(None) for w in workers] == [0, 0, 0]
    finally:
        for w in workers:
            await w.stop()

    records = await read_topic(kafka_bootstrap, topic, n)
    values = [r.value for rs in records.values() for r in rs]
    acked = [a for w in workers for a in w.acks]
    # Memory storage, no faults: exactly the acknowledged events, each once.
    assert len(acked) == sum(done) == len(values) > 7 * 25 * 2
    assert sorted(acked) == sorted(values)
    truth = replay(records)
    for k, (mine, state) in enumerate(zip(leaders, states, strict=True)):
        followed = mine if k == 0 else [*mine, shared]
        assert state["digest"] == digest(truth.fingerprint(followed)), f"worker {k} diverged"
        assert state["skipped_invalid"] == state["skipped_undecodable"] == 0
        assert state["segments"] > 0
    # Everyone followed the shared partition, and it is not empty.
    assert truth.caches[shared].segments


async def test_sigkilled_manager_resumes_from_snapshot(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    n = 4
    topic = f"rlmm-kill-{uuid4().hex[:8]}"
    tps = [pick("k", n, set()) for _ in range(3)]
    snapshots = tmp_path / "snapshots"
    worker = await Worker.spawn(
        spec(
            kafka_bootstrap,
            topic,
            n,
            leaders=[tp_to_json(t) for t in tps],
            lifecycles=100_000,  # never finishes: it is killed
            seed=3,
            snapshot_dir=str(snapshots),
            every_events=40,
        ),
        tmp_path / "worker.err",
    )
    try:
        await worker.expect("READY")
        worker.send("GO")
        async with asyncio.timeout(60):
            while len(worker.acks) < 150 or SnapshotStore(snapshots).load_latest() is None:
                await asyncio.sleep(0.05)
    finally:
        code = await worker.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL, f"the worker ended by itself:\n{worker.stderr_tail()}"
    acked = [decode(a) for a in worker.acks]
    # Let the broker finish whatever was on the wire at the kill before looking.
    await asyncio.sleep(0.3)
    snap = SnapshotStore(snapshots).load_latest()
    assert snap is not None

    policy = SnapshotPolicy(snapshots, every_events=40, interval_s=3600)
    log = KafkaEventLog(
        kafka_bootstrap,
        n,
        KafkaLogSettings(
            topic=topic,
            replication_factor=1,
            consumer_config={"fetch_max_wait_ms": FETCH_MAX_WAIT_MS},
        ),
    )
    async with TopicBasedRemoteLogMetadataManager(
        log, snapshot_policy=policy, close_event_log=True
    ) as manager:
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 30)
        records = await read_topic(kafka_bootstrap, topic, n)
        total = sum(len(r) for r in records.values())
        after_snapshot = sum(
            1 for p, rs in records.items() for r in rs if r.offset > snap.applied_offsets.get(p, -1)
        )
        stats = manager.stats
        assert stats.restored_from_snapshot and stats.full_replays == 0
        # Replayed exactly the records after the snapshot; fewer than the whole log.
        replayed = stats.applied_events + stats.skipped_invalid + stats.skipped_undecodable
        assert replayed == after_snapshot < total
        assert digest(manager.fingerprint(tps)) == digest(replay(records).fingerprint(tps))
        # No acknowledged write lost: in the log, and in effect in the state.
        values = {r.value for rs in records.values() for r in rs}
        assert not [a.hex() for a in worker.acks if a not in values]
        assert unmet_acknowledged(acked, segment_states(manager, tps)) == []
        assert total - len(acked) <= len(tps)  # at most one write in flight per writer
