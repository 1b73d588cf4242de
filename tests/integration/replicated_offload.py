"""Helpers of the replicated-cluster offload tests: one `rlmm offload` per broker, and
the checks every scenario ends with.

Job: run a sidecar process beside each node of the three-node Apache Kafka cluster
(its own data dir, that node's log dir, the cluster's ``__remote_log_metadata`` and
one shared local remote store), produce in waves that roll segments (``segment.ms``),
wait until the archive holds every rolled offset, and check it: contiguous from 0,
each offset served once, equal to what a consumer reads, ``rlmm verify --deep``
clean, and remote bytes within 1.1x of one replica's log.

Invariants: every sidecar process runs in its own process group and is killed when
the helper closes (SIGKILL after a bounded SIGTERM); nothing here waits without a
bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlmm.archive import ArchiveError, open_metadata_view
from rlmm.config import load_config
from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rlmm.ops.record_dump import RecordQuery, read_records
from tests.fixtures.apache_kafka import guard_group
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster

ROOT = Path(__file__).resolve().parents[2]
SEGMENT_MS = 1000
TOPIC_CONFIGS = {"segment.ms": str(SEGMENT_MS), "min.insync.replicas": "2"}
TASK_INTERVAL_MS = 1000


def config_text(
    work: Path, data_dir: Path, bootstrap: str, offload: str = "",
    task_interval_ms: int = TASK_INTERVAL_MS,
) -> str:  # fmt: skip
    return f"""
data_dir = "{data_dir}"
[eventlog]
type = "kafka"
bootstrap_servers = "{bootstrap}"
partitions = 3
replication_factor = 3
[remote]
type = "local"
root = "{work / "remote"}"
[offload]
"retention.ms" = -1
"remote.log.manager.task.interval.ms" = {task_interval_ms}
"leadership.poll.ms" = 500
"verify.crc" = true
{offload}"""


class Sidecars:
    """One `rlmm offload` process per node of ``cluster``, over ``work``."""

    def __init__(
        self, cluster: ApacheKafkaCluster, work: Path, offload: str = "",
        task_interval_ms: int = TASK_INTERVAL_MS,
    ) -> None:  # fmt: skip
        self.cluster = cluster
        self.work = work
        self.offload = offload  # more [offload] settings of the sidecars (TOML lines)
        self.task_interval_ms = task_interval_ms
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        # Each sidecar's guard: it dies with the test process, even a SIGKILLed one.
        self.guards: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def observer(self) -> Path:
        """A config that reads the archive, over the nodes running now (a paused node
        takes connections and never answers: a reader must not bootstrap from it)."""
        path = self.work / "observer.toml"
        live = self.cluster.live_bootstrap()
        path.write_text(config_text(self.work, self.work / "observer", live))
        return path

    def config(self, node: int) -> Path:
        path = self.work / f"sidecar-{node}.toml"
        data_dir = self.work / f"sidecar-{node}"
        path.write_text(config_text(self.work, data_dir, self.cluster.bootstrap, self.offload,
                                    self.task_interval_ms))  # fmt: skip
        return path

    def log(self, node: int) -> Path:
        return self.work / f"sidecar-{node}.log"

    def start(self, node: int) -> None:
        with self.log(node).open("ab") as out:
            self.procs[node] = subprocess.Popen(
                [sys.executable, "-m", "rlmm.cli", "offload", "--config", str(self.config(node)),
                 "--log-dir", str(self.cluster.log_dir(node))],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.guards[node] = guard_group(self.procs[node].pid)

    def _unguard(self, node: int) -> None:
        guard = self.guards.pop(node, None)
        if guard is not None:
            guard.kill()
            guard.wait(timeout=10)

    def start_all(self) -> None:
        for node in self.cluster.ids:
            self.start(node)

    def kill(self, node: int) -> None:
        proc = self.procs.pop(node)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self._unguard(node)

    def stop(self, node: int, timeout: float = 60) -> int:
        proc = self.procs.pop(node)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            raise
        finally:
            self._unguard(node)

    def close(self) -> None:
        for node in list(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop(node, timeout=30)

    def alive(self) -> dict[int, bool]:
        return {n: p.poll() is None for n, p in self.procs.items()}

    def text(self, node: int) -> str:
        return self.log(node).read_text(errors="replace")

    def errors(self) -> dict[int, list[str]]:
        """Error lines of each sidecar's log (an error nobody caused is a bug)."""
        out = {}
        for node in self.cluster.ids:
            if self.log(node).exists():
                lines = [ln for ln in self.text(node).splitlines() if " ERROR " in ln or
                         ln.startswith("ERROR") or "Traceback" in ln]  # fmt: skip
                out[node] = lines
        return out


@contextlib.contextmanager
def sidecars(cluster: ApacheKafkaCluster, work: Path) -> Iterator[Sidecars]:
    group = Sidecars(cluster, work)
    try:
        group.start_all()
        yield group
    finally:
        group.close()


async def produce_waves(
    cluster: ApacheKafkaCluster, topic: str, waves: int, per_wave: int = 30, tag: str = "w"
) -> None:
    """``waves`` waves of ``per_wave`` records over the partitions, each in a segment of
    its own (``segment.ms`` passes between waves), then one record per partition that
    rolls the last wave's segment."""
    count = len(cluster.describe(topic))
    for w in range(waves):
        values = [f"{tag}{w}-{i}".encode() * 8 for i in range(per_wave)]
        await cluster.aproduce(topic, values)
        await asyncio.sleep(SEGMENT_MS / 1000 + 0.2)
    await cluster.aproduce(topic, [f"{tag}-roll-{p}".encode() for p in range(count)])


def _lineage_state(view: Any, tp: Any) -> tuple[int, int, int] | None:
    ranges = view.lineage_ranges(tp)
    if not ranges:
        return None
    return ranges[0].first_offset, ranges[-1].last_offset, len(view.gaps(tp))


def segments(observer: Path, topic: str) -> dict[int, list[RemoteLogSegmentMetadata]]:
    return _observe(observer, topic)[1]


def _observe(observer: Path, topic: str) -> tuple[
    dict[int, tuple[int, int, int]], dict[int, list[RemoteLogSegmentMetadata]], bool
]:  # fmt: skip
    """One replay of the metadata topic (it holds every test's events and grows through
    the session, so a poll replays it once, not once per question): the lineage state
    and the segments of ``topic``'s partitions, and whether nothing is superseded."""
    state: dict[int, tuple[int, int, int]] = {}
    segs: dict[int, list[RemoteLogSegmentMetadata]] = {}
    superseded = False
    with open_metadata_view(load_config(observer, env={})) as view:
        for tp in view.topic_partitions():
            if tp.topic != topic:
                continue
            segs[tp.partition] = view.segments(tp)
            lineage = _lineage_state(view, tp)
            if lineage is not None:
                state[tp.partition] = lineage
            superseded |= len(view.lineage(tp)) != len(segs[tp.partition])
    return state, segs, not superseded


async def wait_archived(
    group: Sidecars, topic: str, ends: dict[int, int], timeout: float = 120
) -> dict[int, tuple[int, int, int]]:
    """Wait until each partition's lineage serves [0, ends[p]] with no gap and nothing
    is left STARTED or superseded (the leaders' expiration deleted it)."""
    deadline = time.monotonic() + timeout
    seen: Any = None
    while True:
        try:
            state, segs, clean = await asyncio.to_thread(_observe, group.observer, topic)
        except ArchiveError as e:  # no metadata topic yet: no sidecar has created it
            state, segs, clean, seen = {}, {}, False, repr(e)
        else:
            seen = (state, {p: [(m.start_offset, m.end_offset, m.state.name, m.broker_id)
                                for m in ms] for p, ms in segs.items()})  # fmt: skip
        settled = clean and all(
            p in state and state[p][0] == 0 and state[p][1] >= end and state[p][2] == 0
            for p, end in ends.items()
        ) and all(
            m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            for ms in segs.values() for m in ms
        )  # fmt: skip
        if settled:
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"archive of {topic} not at {ends} within {timeout}s: {seen}\n"
                f"cluster: {group.cluster.describe(topic)}\nlocal: {local_views(group, topic)}\n"
                + "\n".join(f"--- sidecar {n}:\n{group.text(n)[-3000:]}" for n in group.cluster.ids)
            )
        await asyncio.sleep(0.5)


def local_views(group: Sidecars, topic: str) -> dict[int, Any]:
    """What each node's log dir says of the topic's partitions (for failure messages)."""
    from rlmm.offload.logdir import scan_log_dirs
    from rlmm.offload.settings import OffloadSettings

    settings = OffloadSettings.from_config(load_config(group.observer, env={}))
    out: dict[int, Any] = {}
    for node in group.cluster.ids:
        try:
            for src in scan_log_dirs([group.cluster.log_dir(node)], settings):
                if src.topic_id_partition.topic == topic:
                    out.setdefault(node, {})[src.topic_id_partition.partition] = {
                        "rolled": [(r.base_offset, r.next_base_offset)
                                   for r in src.rolled_segments()][-3:],
                        "lso": src.last_stable_offset(),
                        "leo": src.log_end_offset(),
                        "epochs": [(e.epoch, e.start_offset) for e in src.leader_epochs()],
                    }  # fmt: skip
        except Exception as e:  # a message helper: never the failure itself
            out[node] = repr(e)
    return out


def archived_records(observer: Path, topic: str) -> dict[int, list[tuple[int, bytes | None]]]:
    """(offset, value) of every archived record, per partition (read_uncommitted)."""
    out: dict[int, list[tuple[int, bytes | None]]] = {}
    for row in read_records(load_config(observer, env={}), RecordQuery(topic=topic)):
        out.setdefault(row["partition"], []).append((row["offset"], row["value"]))
    return out


def check_archive(
    group: Sidecars, topic: str, served: dict[int, list[tuple[int, bytes | None, bytes | None]]],
    ends: dict[int, int],
) -> dict[str, Any]:  # fmt: skip
    """The checks after every scenario; returns figures (bytes ratio per partition)."""
    archived = archived_records(group.observer, topic)
    for p, end in ends.items():
        want = [(o, v) for o, _k, v in served[p] if o <= end]
        got = [(o, v) for o, v in archived.get(p, []) if o <= end]
        offsets = [o for o, _ in got]
        assert len(offsets) == len(set(offsets)), f"partition {p}: an offset served twice"
        assert got == want, f"partition {p}: archive differs from the consumer"
    verify = subprocess.run(
        # this topic only: the session cluster's metadata topic holds other tests' segments,
        # whose objects are in their own stores
        [sys.executable, "-m", "rlmm.cli", "verify", "--deep", "--json", "--topic", topic,
         "--config", str(group.observer)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    problems = json.loads(verify.stdout)["problems"] if verify.stdout.startswith("{") else None
    assert verify.returncode == 0 and problems == [], (
        f"verify --deep: {problems if problems is not None else verify.stdout}"
        f" {verify.stderr[-2000:]}\n"
        + "\n".join(f"--- sidecar {n}:\n{group.text(n)[-3000:]}" for n in group.cluster.ids)
    )
    ratios = {}
    segs = segments(group.observer, topic)
    for p, ms in segs.items():
        remote = sum(m.segment_size_in_bytes for m in ms)
        end = max(m.end_offset for m in ms)
        leader = group.cluster.describe(topic)[p].leader
        pdir = group.cluster.log_dir(leader) / f"{topic}-{p}"
        logs = sorted(pdir.glob("*.log"))
        bases = [int(x.stem) for x in logs]
        local = sum(x.stat().st_size for x, nxt in zip(logs, [*bases[1:], None], strict=True)
                    if nxt is not None and nxt <= end + 1)  # fmt: skip
        ratios[p] = remote / local
        assert ratios[p] <= 1.1, f"partition {p}: remote {remote} bytes, one replica {local}"
    return {"bytes_ratio": ratios}
