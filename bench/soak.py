"""Soak: everything failing at once, for a long time, and nothing lost at the end.

On loopback: an Apache Kafka 4.1.1 broker (KRaft, its own tiered storage off) that
also holds rlmm's ``__remote_log_metadata`` topic; producers writing three topics at a
steady rate (every codec, keys and null keys, headers, idempotent, transactional with
aborts) with small segments and time- and size-based local retention, so Kafka
deletes segments while the sidecar works; a long-running ``rlmm offload`` (1 s task
interval) over the broker's log dir, SIGKILLed at random moments (from outside, or
from inside at a copy/delete step: mid-upload, mid-delete) and restarted; moto's S3
server behind a fault proxy injecting 500s, 503 SlowDown, slow answers, dropped
connections and answers lost after the request was carried out, with a storm of
faults in the middle of the run; one SIGKILL and restart of the broker; Prometheus
scraping the sidecar with deploy/prometheus/rules.yml. Two consumers
(read_uncommitted, read_committed) read every record while it is still on the broker:
the truth the archive is compared to.

At the end: producers stop and the last segments roll; the sidecar is stopped with
SIGTERM and one clean ``rlmm offload --once`` round runs; ``rlmm verify --deep``
finds the crash leftovers, ``rlmm gc --apply`` removes exactly them and a second
verify is clean; for every partition and both isolation levels the archived records
equal the consumers' (no gap, no duplicate, same bytes), and what was below the
archive was expired by remote retention, whose segments are gone from the metadata
and the bucket, or was never copied because it was past remote retention already
when its turn came (the sidecar logs each such segment's offsets); the storm's alert
(RlmmRemoteStorageRefusing) fired during the storm and resolved after it; every Grafana
dashboard query returns data; the sidecar's RSS and open fds (its last incarnation) stay flat; no
process outlives the run. Prints ONE JSON document; exit
0 when every check passed, 1 otherwise.

The RSS and fd samples (every 2 s) are written to the work dir as they are taken
(``samples/<sidecar>.jsonl``, one JSON line each, flushed; ``run.json`` says when the
run started and for how long), and the report reads them back from there. A run that
fails with an exception keeps its work dir (as ``--keep`` does), and ``--report-from
WORK`` reports the samples of such a run (or of one killed outright) without running
anything.

With ``--brokers 3`` the broker is a three-node Apache Kafka cluster (every node broker
and controller): the topics have 3 replicas and min.insync.replicas=2, and one ``rlmm
offload`` runs beside each node's log dir (all on ``__remote_log_metadata`` with 3
replicas and the one fault-injected S3 store); the sidecar kills go on across the
three; instead of the one broker restart, broker SIGKILLs, restarts and preferred
leader elections rotate through the run (never two nodes down: bench/_replicated.py).
The end checks are the same (the crashed round on the node leading the most
partitions, then a clean round on every node), and the report adds ``lost`` and
``duplicated`` (0), ``bytes_uploaded_over_one_replica`` (every copy attempt's bytes,
from the metadata, over one replica's bytes for every offset ever archived, from the
replicas' log dirs; target <= 1.05) and ``leadership_change_to_first_copy_s`` (each
leadership change the soak caused, to the new leader's first FINISHED copy of that
partition; target <= 2 task intervals), and the sidecars' own leadership metrics.

Usage: python bench/soak.py [--duration 600] [--rate 200] [--seed N] [--brokers 1|3] [--keep]
       python bench/soak.py --report-from WORK
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from bench._machine import machine  # noqa: E402
from bench._replicated import (  # noqa: E402
    BatchLedger,
    BrokerChaos,
    LeaderWatch,
    SidecarMetrics,
    bytes_figures,
    first_copy_figures,
)
from rlmm.archive import ReadRequest, close_remote_storage, open_metadata_view, plan_slices  # noqa: E402
from rlmm.archive.reader import read_slice  # noqa: E402
from rlmm.config import load_config  # noqa: E402
from rlmm.offload.faults import ENV as KILL_ENV  # noqa: E402
from rlmm.offload.faults import STEPS as KILL_STEPS  # noqa: E402
from rlmm.offload.logdir import read_offset_checkpoint  # noqa: E402
from tests.fixtures.apache_kafka import ApacheKafkaBroker  # noqa: E402
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402
from tests.fixtures.prometheus import (  # noqa: E402
    PrometheusServer,
    PrometheusUnavailable,
    prometheus_tools,
    run_prometheus,
)
from tests.fixtures.s3_faults import FaultyS3, faulty_s3  # noqa: E402

RLMM = str(Path(sys.executable).parent / "rlmm")
CODECS = (None, "gzip", "snappy", "lz4", "zstd")
BUCKET = "soak"
WRAP_ENV = "SOAK_SIDECAR_WRAP"  # not RLMM_*: rlmm refuses the RLMM_* it does not know
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
# The storm's alert: S3 refusing the copies (they wait it out rather than fail, so the
# copy-errors alert need not fire; its states are reported beside).
STORM_ALERT = "RlmmRemoteStorageRefusing"
COPY_ALERT = "RlmmRemoteCopyErrors"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    local: dict[str, str]  # the broker's topic configs (local retention)
    remote_retention_ms: int  # the sidecar's retention.ms (-1: keep)


@dataclass(frozen=True)
class Settings:
    duration_s: float = 600.0
    rate: float = 200.0  # records/s over all producers
    segment_ms: int = 3000
    fault_rate: float = 0.03  # share of S3 requests meeting a fault outside the storm
    # During the storm: an S3 brown-out where most requests fail fast (no slow answers:
    # the store must be held most of the time for the storm's alert to fire).
    storm_rate: float = 0.9
    storm: tuple[float, float] = (0.08, 0.5)  # storm start and end, fractions of the run
    kills: tuple[float, float] = (10.0, 40.0)  # seconds between sidecar kills
    kills_end: float = 0.55  # no kill after this: the last incarnation's RSS is measured
    kills_in_storm: bool = True  # False: the storm's copy errors come without pauses
    broker_restart_at: float = 0.55  # after the storm: the alert's errors are S3's
    brokers: int = 1  # 3: a cluster, a sidecar per node, broker chaos instead of the restart
    chaos: tuple[float, float] = (0.05, 0.8)  # broker kills/elections: first, last start
    broker_down_s: tuple[float, float] = (5.0, 15.0)  # a killed node stays down after failover
    chaos_pause_s: tuple[float, float] = (15.0, 30.0)  # from an election to the next kill
    seed: int = 0
    alert_scale: float | None = None  # rules' windows x this (None: duration / 600)
    copy_retry_s: float | None = None  # [remote] copy_retry_s (None: 30 s x scale)
    work: Path | None = None
    keep: bool = False

    @property
    def scale(self) -> float:
        return self.alert_scale if self.alert_scale is not None else self.duration_s / 600.0

    def topics(self) -> list[Topic]:
        d_ms = int(self.duration_s * 1000)
        # Kafka deletes local segments whether or not the sidecar copied them (it knows
        # nothing of the sidecar): local retention must outlast the storm's copy lag.
        # That is the storm, then the backlog's copies (slowed by kills, a broker
        # restart, a busy machine: in CI the short soak's lag reached 132 s after its
        # 82 s storm, past the 120 s it then had, and 512 records were missed).
        storm_s = (self.storm[1] - self.storm[0]) * self.duration_s
        local_s = max(self.duration_s * 0.8, storm_s + 90)
        local_ms = str(int(local_s * 1000))
        per_partition = self.rate * 0.15 / 2 * 1100  # bytes/s into each soak-bytes partition
        local_bytes = str(int(per_partition * local_s))
        base = {"segment.ms": str(self.segment_ms), "message.timestamp.type": "CreateTime"}
        if self.brokers > 1:
            base["min.insync.replicas"] = "2"
        return [
            Topic("soak-keys", 3, {**base, "retention.ms": local_ms}, int(d_ms * 0.85)),
            Topic(
                "soak-bytes", 2, {**base, "retention.bytes": local_bytes, "retention.ms": "-1"}, -1
            ),
            Topic("soak-txn", 2, {**base, "retention.ms": local_ms}, -1),
        ]


@dataclass
class Tally:
    """What happened during the run (JSON-ready)."""

    produced: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    send_errors: int = 0
    transactions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    kills_external: int = 0
    kills_at_steps: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sidecar_starts: int = 0
    sidecar_exits: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    broker_restarts: int = 0
    broker_restart_s: float = 0.0
    alert_states: list[tuple[float, str]] = field(default_factory=list)  # STORM_ALERT's
    copy_alert_states: list[tuple[float, str]] = field(default_factory=list)
    consumer_resets: int = 0


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- samples, on disk as they are taken ---------------------------------------------

SAMPLES_DIR = "samples"  # under the work dir: <sidecar>.jsonl
RUN_FILE = "run.json"  # under the work dir: when the run started, for how long, its files
Sample = tuple[float, int, int, int]  # monotonic time, incarnation, RSS bytes, open fds


class SampleLog:
    """One sidecar's samples, a JSON line each, appended and flushed as each is taken:
    a run that dies before its report leaves every sample it took in its work dir."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def append(self, sample: Sample) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        t, incarnation, rss, fds = sample
        line = {"t": t, "incarnation": incarnation, "rss": rss, "fds": fds}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_samples(path: Path) -> list[Sample]:
    """The samples a SampleLog wrote (none: no file). A last line cut short by a crash
    mid-write is left out; any other line that is not a sample is an error."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Sample] = []
    for n, line in enumerate(lines, 1):
        try:
            d = json.loads(line)
            out.append((float(d["t"]), int(d["incarnation"]), int(d["rss"]), int(d["fds"])))
        except (ValueError, KeyError, TypeError) as e:
            if n == len(lines):
                break
            raise ValueError(f"{path}:{n}: not a sample: {line[:80]!r}") from e
    return out


def write_run(work: Path, s: Settings, started: float, logs: dict[str, SampleLog]) -> None:
    """``run.json``: what a report needs besides the samples (``logs``: by node)."""
    (work / RUN_FILE).write_text(json.dumps({
        "started_monotonic": started, "started_unix_s": time.time(),
        "duration_s": s.duration_s, "brokers": s.brokers, "seed": s.seed,
        "samples": {node: str(log.path.relative_to(work)) for node, log in logs.items()},
    }, indent=2) + "\n")  # fmt: skip


def resources_from(work: Path) -> dict[str, Any]:
    """The report's ``resources``, from the work dir's files alone: the sidecar's (one
    broker), or each node's (a cluster)."""
    run = json.loads((work / RUN_FILE).read_text())
    started, duration = float(run["started_monotonic"]), float(run["duration_s"])
    per_node = {
        node: _resources(read_samples(work / rel), started + 0.5 * duration,
                         started + 0.75 * duration)
        for node, rel in run["samples"].items()
    }  # fmt: skip
    return next(iter(per_node.values())) if int(run["brokers"]) == 1 else per_node


def saved_report(work: Path) -> dict[str, Any]:
    """``--report-from``: what a previous run's work dir holds, reported."""
    run = json.loads((work / RUN_FILE).read_text())
    return {
        "report_from": str(work),
        "run": run,
        "resources": resources_from(work),
        "note": "from the samples alone: the end checks (records, verify, retention, alert)"
        " are the live run's only",
    }


def digest(
    key: bytes | None, value: bytes | None, headers: Any, timestamp_ms: int, ts_type: int
) -> bytes:
    h = hashlib.blake2b(digest_size=12)
    for part in (key, value):
        h.update(b"\x00" if part is None else b"\x01" + len(part).to_bytes(4, "big") + part)
    for name, data in headers:
        h.update(name.encode() + b"\x00" + (b"-" if data is None else data) + b"\x00")
    h.update(f"|{timestamp_ms}|{ts_type}".encode())
    return h.digest()


# --- set-up -----------------------------------------------------------------


def sidecar_config(
    work: Path, s: Settings, bootstrap: str, s3_url: str, name: str | None = None
) -> Path:
    """The sidecars' config (one broker: broker_id 1); with a cluster, ``name`` (a node,
    or the observer the end checks read through) gets its own data dir, and the broker
    id comes from each node's meta.properties."""
    topics = "".join(
        f'[offload.topics.{t.name}]\n"retention.ms" = {t.remote_retention_ms}\n' for t in s.topics()
    )
    path = work / ("rlmm.toml" if name is None else f"rlmm-{name}.toml")
    head = "broker_id = 1\n" if name is None else ""
    path.write_text(
        f"""{head}data_dir = "{work / ("rlmm" if name is None else f"rlmm-{name}")}"
[eventlog]
type = "kafka"
bootstrap_servers = "{bootstrap}"
partitions = 4
replication_factor = {s.brokers}
[snapshot]
every_events = 2000
interval_s = 30.0
[remote]
type = "s3"
bucket = "{BUCKET}"
prefix = "cluster"
endpoint_url = "{s3_url}"
region = "us-east-1"
max_attempts = 3
# The copy's own tries after the client's: 30 s by default, scaled as the alert windows
# are, since the run compresses an operator's timeline.
copy_retry_s = {30.0 * s.scale if s.copy_retry_s is None else s.copy_retry_s:.1f}
connect_timeout = 2.0
read_timeout = 3.0
[offload]
"remote.storage.enable" = true
"retention.ms" = -1
"remote.log.manager.task.interval.ms" = 1000
# leadership asked twice a task interval, as the intervals are shortened across the board
"leadership.poll.ms" = 500
{topics}"""
    )
    return path


def scaled_rules(scale: float) -> str:
    """rules.yml with every duration (range windows, ``for:``) multiplied by ``scale``:
    a short soak cannot wait the 3 minutes the real copy-errors rule needs."""
    text = RULES.read_text()
    if scale == 1.0:
        return text

    def seconds(m: re.Match[str]) -> str:
        return f"{m.group(1)}{max(1, round(int(m.group(2)) * 60 * scale))}s{m.group(3)}"

    return re.sub(r"(\[|for: )(\d+)m(\]|\s)", seconds, text)


async def create_topics(bootstrap: str, topics: list[Topic], replicas: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t.name, t.partitions, replicas, topic_configs=t.local) for t in topics]
        )
    finally:
        await admin.close()


# --- producers and consumers --------------------------------------------------


Step = Callable[[AIOKafkaProducer, int], Awaitable[None]]


class Load:
    """The producers: steady rates until ``stop``; a failed send is counted, not fatal."""

    def __init__(self, bootstrap: str, s: Settings, tally: Tally) -> None:
        self.bootstrap = bootstrap
        self.s = s
        self.tally = tally
        self.stopping = asyncio.Event()
        self.rng = random.Random(s.seed)

    async def _paced(self, rate: float, codec: str | None, step: Step) -> None:
        """``step(producer, seq)`` ``rate`` times a second with an idempotent producer,
        until ``stopping``; a failed send is counted and the next one goes on."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, compression_type=codec, enable_idempotence=True,
            acks="all", linger_ms=20, request_timeout_ms=30000,
        )  # fmt: skip
        await producer.start()
        try:
            interval = 1.0 / rate
            next_at = time.monotonic()
            seq = 0
            while not self.stopping.is_set():
                seq += 1
                try:
                    await step(producer, seq)
                except Exception as e:  # the broker restarts: keep producing
                    self.tally.send_errors += 1
                    log(f"send failed ({type(e).__name__}: {e}); going on")
                    await asyncio.sleep(0.5)
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                if time.monotonic() - next_at > 5:
                    next_at = time.monotonic()  # after an outage: no burst to catch up
        finally:
            await producer.stop()

    async def codec_producer(self, codec: str | None) -> None:
        async def step(producer: AIOKafkaProducer, seq: int) -> None:
            key = None if seq % 11 == 0 else f"key-{seq % 37}".encode()
            value = f"{codec}-{seq}-".encode() * (1 + seq % 5)
            headers = [("codec", str(codec).encode()), ("seq", str(seq).encode())]
            if seq % 7 == 0:
                headers.append(("bin", bytes([seq % 256, 0, 255])))
            await producer.send_and_wait("soak-keys", value, key=key, headers=headers)
            self.tally.produced["soak-keys"] += 1

        await self._paced(self.s.rate * 0.6 / len(CODECS), codec, step)

    async def bytes_producer(self) -> None:
        async def step(producer: AIOKafkaProducer, seq: int) -> None:
            value = self.rng.randbytes(1000)  # incompressible: the size is the size
            await producer.send_and_wait("soak-bytes", value, partition=seq % 2)
            self.tally.produced["soak-bytes"] += 1

        await self._paced(self.s.rate * 0.15, "lz4", step)

    async def txn_producer(self) -> None:
        """Transactions of 1-12 records; one in four aborted. A producer that breaks
        (the broker restarted under it) is replaced: the new one fences the old."""
        seq = 0
        rate = self.s.rate * 0.25
        while not self.stopping.is_set():
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, transactional_id="soak-txn",
                compression_type="zstd", request_timeout_ms=30000,
            )  # fmt: skip
            try:
                await producer.start()
                while not self.stopping.is_set():
                    count = self.rng.randint(1, 12)
                    abort = self.rng.random() < 0.25
                    await producer.begin_transaction()
                    for _ in range(count):
                        seq += 1
                        await producer.send(
                            "soak-txn", f"txn-{seq}-{'abort' if abort else 'commit'}".encode(),
                            key=f"t{seq % 5}".encode(), partition=seq % 2,
                            headers=[("txn", b"abort" if abort else b"commit")],
                        )  # fmt: skip
                    if abort:
                        await producer.abort_transaction()
                    else:
                        await producer.commit_transaction()
                    self.tally.transactions["aborted" if abort else "committed"] += 1
                    self.tally.produced["soak-txn"] += count
                    await asyncio.sleep(count / rate)
            except Exception as e:  # replaced below
                self.tally.transactions["failed"] += 1
                log(f"transactional producer broke ({type(e).__name__}: {e}); a new one")
                await asyncio.sleep(1)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), 30)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [
            *(asyncio.create_task(self.codec_producer(c)) for c in CODECS),
            asyncio.create_task(self.bytes_producer()),
            asyncio.create_task(self.txn_producer()),
        ]


class Truth:
    """Every record a consumer read while it was on the broker, per isolation level."""

    def __init__(self, bootstrap: str, topics: list[Topic], tally: Tally) -> None:
        self.bootstrap = bootstrap
        self.tps = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
        self.tally = tally
        self.records: dict[str, dict[tuple[str, int], dict[int, bytes]]] = {
            level: defaultdict(dict) for level in ("read_uncommitted", "read_committed")
        }
        self.consumers: dict[str, AIOKafkaConsumer] = {}
        self.stopping = asyncio.Event()

    async def consume(self, level: str) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", isolation_level=level, fetch_max_wait_ms=200,
        )  # fmt: skip
        await consumer.start()
        self.consumers[level] = consumer
        consumer.assign(self.tps)
        seen = self.records[level]
        try:
            while not self.stopping.is_set():
                batches = await consumer.getmany(timeout_ms=300, max_records=5000)
                for tp, records in batches.items():
                    into = seen[(tp.topic, tp.partition)]
                    for r in records:
                        if into and r.offset < max(into):
                            self.tally.consumer_resets += 1
                        into[r.offset] = digest(
                            r.key, r.value, r.headers, r.timestamp, r.timestamp_type
                        )
        finally:
            await consumer.stop()

    async def caught_up(self, timeout: float = 120) -> None:
        """Until each consumer's position is at its end (the LSO for read_committed)."""
        deadline = time.monotonic() + timeout
        for level, consumer in self.consumers.items():
            while True:
                ends = await consumer.end_offsets(self.tps)
                if all([await consumer.position(tp) >= ends[tp] for tp in self.tps]):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {level} consumer did not catch up")
                await asyncio.sleep(0.5)


# --- the sidecar under fire ----------------------------------------------------


def _timestamped(pipe: IO[bytes], path: Path) -> None:
    """Copy a sidecar's output into ``path``, each line after the time it came (the
    sidecar's own log lines carry none)."""
    with pipe, path.open("ab") as out:
        for line in pipe:
            now = time.time()
            out.write(f"{time.strftime('%H:%M:%S', time.localtime(now))}"
                      f".{int(now * 1000) % 1000:03d} ".encode() + line)  # fmt: skip
            out.flush()


class Sidecar:
    """Runs ``rlmm offload`` for good, restarting it whenever it dies; the killer
    SIGKILLs it at random moments, half the time through a kill point at a random
    copy/delete step instead (the process kills itself there). ``node``: the cluster
    node whose log dir it offloads (None: the one broker)."""

    def __init__(
        self, config: Path, s: Settings, logs: Path, tally: Tally, log_dir: Path,
        node: int | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        self.s = s
        self.logs = logs
        self.tally = tally
        self.log_dir = log_dir
        self.node = node
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.kill_point: str | None = None
        self.rng = random.Random(s.seed + 1 + (0 if node is None else 100 * node))
        self.killing = True
        self.storm = (math.inf, math.inf)  # set by killer()
        self.stopping = asyncio.Event()
        self.starts = 0  # this sidecar's incarnations
        stem = "sidecar" if node is None else f"sidecar-{node}"
        # on disk as they are taken (the work dir is the logs' parent): the report reads them
        self.sample_log = SampleLog(logs.parent / SAMPLES_DIR / f"{stem}.jsonl")

    @property
    def name(self) -> str:
        node = "" if self.node is None else f"{self.node}."
        return f"sidecar {node}{self.starts}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        env = {**os.environ, **AWS_ENV, "PYTHONUNBUFFERED": "1"}
        env.pop(KILL_ENV, None)
        self.kill_point = None
        calm = not self.s.kills_in_storm and self.storm[0] <= time.monotonic() <= self.storm[1]
        if self.killing and not calm and self.rng.random() < 0.5:
            step = self.rng.choice(KILL_STEPS)
            self.kill_point = f"{step}@{self.rng.randint(1, 4)}~{self.rng.randint(0, 150)}"
            env[KILL_ENV] = self.kill_point
        self.tally.sidecar_starts += 1
        self.starts += 1
        stem = "sidecar" if self.node is None else f"sidecar-{self.node}"
        # SOAK_SIDECAR_WRAP: a command run instead of `rlmm`, with rlmm's arguments
        # after it (e.g. `python bench/_memtrace.py DIR`: the sidecar under tracemalloc).
        rlmm_cmd = shlex.split(env.pop(WRAP_ENV, "")) or [RLMM]
        self.proc = subprocess.Popen(
            [*rlmm_cmd, "offload", "--config", str(self.config), "--log-dir",
             str(self.log_dir), "--metrics-port", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        path = self.logs / f"{stem}-{self.starts:03d}.log"
        threading.Thread(target=_timestamped, args=(self.proc.stdout, path), daemon=True).start()

    async def supervise(self) -> None:
        """Restart the sidecar whenever it exits, until ``stopping``."""
        while not self.stopping.is_set():
            proc = self.proc
            assert proc is not None
            if proc.poll() is not None:
                code = proc.returncode
                if code == -signal.SIGKILL and self.kill_point:
                    self.tally.kills_at_steps[self.kill_point.split("@")[0]] += 1
                    log(f"{self.name}: killed itself at {self.kill_point}")
                self.tally.sidecar_exits[str(code)] += 1
                await asyncio.sleep(self.rng.uniform(0.5, 3.0))
                if not self.stopping.is_set():
                    self.spawn()
                continue
            await asyncio.sleep(0.2)

    async def killer(
        self, until: float, storm: tuple[float, float], others: list[Sidecar] | None = None
    ) -> None:
        """Until ``until``, SIGKILL a sidecar (this one, or one of ``others`` and this one
        at random) every ``kills`` seconds; then each one a last time, to run on without
        a kill point."""
        every = [self, *(others or [])]
        for sidecar in every:
            sidecar.storm = storm
        while time.monotonic() < until:
            await asyncio.sleep(self.rng.uniform(*self.s.kills))
            if time.monotonic() >= until:
                break
            if not self.s.kills_in_storm and storm[0] <= time.monotonic() <= storm[1]:
                continue  # (spawn() sets no kill point in it either)
            (self.rng.choice(every) if len(every) > 1 else self).kill()
        for sidecar in every:
            sidecar.killing = False
            sidecar.kill()  # the last incarnation runs without a kill point

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            log(f"{self.name}: SIGKILL")
            self.tally.kills_external += 1
            self.kill_point = None  # killed from outside, not at its step

    async def sample(self) -> None:
        """RSS and open fds of the running incarnation, every 2 s, to the sample log."""
        try:
            while not self.stopping.is_set():
                proc = self.proc
                if proc is not None and proc.poll() is None:
                    with contextlib.suppress(psutil.Error):
                        p = psutil.Process(proc.pid)
                        self.sample_log.append(
                            (time.monotonic(), self.starts, p.memory_info().rss, p.num_fds())
                        )
                await asyncio.sleep(2)
        finally:
            self.sample_log.close()

    def terminate(self, timeout: float = 60) -> int | None:
        """SIGTERM the running incarnation; its exit code (None: it had to be killed)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None


def rlmm(
    config: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> tuple[int, Any, str]:
    """Run ``rlmm --json ARGS``: (exit code, parsed stdout, stderr tail); a command
    over its timeout is killed and reported as exit -1, so the run still reports."""
    try:
        done = subprocess.run(
            [RLMM, "--config", str(config), "--json", *args], capture_output=True, text=True,
            timeout=timeout, env={**os.environ, **AWS_ENV, **(env or {})},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1, None, f"rlmm {' '.join(args)}: killed after its {timeout:.0f} s timeout"
    try:
        parsed: Any = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        parsed = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, parsed, done.stderr[-3000:]


# --- Prometheus ------------------------------------------------------------------


async def watch_alerts(prom: PrometheusServer, tally: Tally, stopping: asyncio.Event) -> None:
    """The storm's and the copy-errors alerts' states every 2 s (inactive, pending, firing)."""
    last = {STORM_ALERT: "", COPY_ALERT: ""}
    kept = {STORM_ALERT: tally.alert_states, COPY_ALERT: tally.copy_alert_states}
    while not stopping.is_set():
        try:
            alerts = await asyncio.to_thread(prom.api, "alerts")
            for name, states_seen in kept.items():
                states = {a["state"] for a in alerts["alerts"] if a["labels"]["alertname"] == name}
                state = "firing" if "firing" in states else "pending" if states else "inactive"
                if state != last[name]:
                    states_seen.append((time.monotonic(), state))
                    log(f"{name}: {state}")
                    last[name] = state
        except (OSError, AssertionError) as e:
            log(f"alerts query failed: {e}")
        await asyncio.sleep(2)


async def wait_quiet(tally: Tally, timeout: float) -> None:
    """Until the storm's alert is inactive, or ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tally.alert_states and tally.alert_states[-1][1] == "inactive":
            return
        await asyncio.sleep(1)
    log(f"{STORM_ALERT} still not inactive after {timeout:.0f} s")


def dashboard_queries(prom: PrometheusServer, job: str, wait_s: float) -> dict[str, Any]:
    """Every dashboard query, asked again until each has data or ``wait_s`` passes.

    A restarted sidecar sets its remote log size when it leads a partition, but its
    delete lag only in its first round's expiration, after the copies: under load, and
    with the last kill late in the run, that round can still be copying when the check
    starts."""
    from tests.deploy.test_grafana_dashboard import concrete, queries

    deadline = time.monotonic() + wait_s
    while True:
        empty = [name for name, expr in queries()
                 if not prom.query(concrete(expr, job=job, rate="30s"))]  # fmt: skip
        if not empty or time.monotonic() > deadline:
            waited = round(wait_s - max(0.0, deadline - time.monotonic()), 1)
            return {"queries": len(queries()), "without_data": empty, "waited_s": waited}
        time.sleep(2)


# --- the checks --------------------------------------------------------------------


def _archived(config: Path, topic: str, level: str) -> Iterator[dict[str, Any]]:
    """``rlmm records``' rows (rlmm.ops.record_dump.read_records), but a gap in the
    lineage is skipped with a warning instead of ending the read: the comparison counts
    its offsets as lost."""
    cfg = load_config(config, env={**os.environ, **AWS_ENV})
    with open_metadata_view(cfg) as view:
        chosen = tuple(sorted(tp.partition for tp in view.topic_partitions() if tp.topic == topic))
        request = ReadRequest(partitions={topic: chosen}, isolation_level=level,
                              include_headers=True, fail_on_data_loss=False)  # fmt: skip
        slices = plan_slices(view, request, remote_options=cfg.remote_options())
    try:
        for piece in slices:
            for batch in read_slice(piece):
                yield from batch.to_pylist()
    finally:
        close_remote_storage()


def archive_rows(config: Path, topic: str, level: str) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, digest) of every archived record of ``topic``, by partition."""
    rows: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for row in _archived(config, topic, level):
        ts: dt.datetime = row["timestamp"]
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.UTC)
        ms = (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
        headers = [(h["key"], h["value"]) for h in row["headers"] or ()]
        rows[row["partition"]].append(
            (row["offset"], digest(row["key"], row["value"], headers, ms, row["timestampType"]))
        )
    return rows


# The sidecar's error line when the broker deleted offsets before they were copied.
MISSED = re.compile(
    r"(?P<topic>\S+)-(?P<partition>\d+) \([^)]*\): offsets (?P<first>\d+)\.\.(?P<last>\d+)"
    r" were deleted from the local log before they were copied"
)
# Its info line for a segment not copied because remote retention would delete it at
# once (what Kafka's copy then expiration does in two steps): expired, not lost.
SKIPPED = re.compile(
    r"(?P<topic>\S+)-(?P<partition>\d+) \([^)]*\): not copying \S+ \(offsets"
    r" (?P<first>\d+)\.\.(?P<last>\d+)\): past retention\.ms already"
)


Ranges = dict[tuple[str, int], list[tuple[int, int]]]  # inclusive offset ranges per partition


def logged_ranges(logs: Path, line: re.Pattern[str]) -> Ranges:
    """The offset ranges the sidecars' logs name in ``line`` (MISSED, SKIPPED)."""
    out: Ranges = defaultdict(list)
    for path in sorted(logs.glob("sidecar*.log")):
        for m in line.finditer(path.read_text(errors="replace")):
            tp = (m["topic"], int(m["partition"]))
            out[tp].append((int(m["first"]), int(m["last"])))
    return dict(out)


def compare(
    truth: Truth, config: Path, topics: list[Topic], rolls: dict[tuple[str, int], int],
    expired: Ranges, missed: Ranges, skipped: Ranges,
) -> dict[str, Any]:  # fmt: skip
    """Archived records against the consumers', per partition and isolation level. A
    lost record the sidecar reported missed (the broker deleted it first) is counted
    apart, in ``missed_by_broker``: the run's local retention was too short for it. A
    record of a segment the sidecar did not copy because it was past remote retention
    already (``skipped``) is expired, in ``skipped_past_retention``: not a loss."""
    out: dict[str, Any] = {"compared": 0, "lost": 0, "missed_by_broker": 0, "duplicates": 0,
                           "mismatched": 0, "unseen_by_consumer": 0,
                           "skipped_past_retention": 0, "partitions": {}}  # fmt: skip
    for level, seen in truth.records.items():
        for t in topics:
            archived = archive_rows(config, t.name, level)
            for p in range(t.partitions):
                tp = (t.name, p)
                want = {o: d for o, d in seen[tp].items() if o < rolls[tp]}
                got = archived.get(p, [])
                offsets = [o for o, _ in got]
                dup = len(offsets) - len(set(offsets))
                got_map = dict(got)
                first = offsets[0] if offsets else rolls[tp]
                below = [o for o in want if o < first]
                merged = _merged(expired.get(tp, []))
                covered = [o for o in below if _within(o, merged)]
                lost = [o for o in want if o >= first and o not in got_map]
                kept = set(covered)  # once: below holds every record an hour expired
                lost += [o for o in below if o not in kept]
                retired = _merged(skipped.get(tp, []))
                past_retention = [o for o in lost if _within(o, retired)]
                lost = [o for o in lost if not _within(o, retired)]
                gaps = _merged(missed.get(tp, []))
                reported = [o for o in lost if _within(o, gaps)]
                lost = [o for o in lost if not _within(o, gaps)]
                bad = [o for o, d in got_map.items() if o in want and want[o] != d]
                unseen = [o for o in got_map if o not in want]
                out["compared"] += len(got_map)
                out["lost"] += len(lost)
                out["missed_by_broker"] += len(reported)
                out["skipped_past_retention"] += len(past_retention)
                out["duplicates"] += dup
                out["mismatched"] += len(bad)
                out["unseen_by_consumer"] += len(unseen)
                out["partitions"][f"{t.name}-{p}/{level}"] = {
                    "archived": len(got_map), "first_offset": first if got else None,
                    "expired_below": len(covered), "lost": lost[:10],
                    "missed_by_broker": len(reported), "mismatched": bad[:10],
                    "skipped_past_retention": len(past_retention),
                    "duplicates": dup, "unseen_by_consumer": unseen[:10],
                }  # fmt: skip
    return out


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive offset ranges as sorted disjoint ones (two leaders' copies overlap)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _within(offset: int, merged: list[tuple[int, int]]) -> bool:
    """Whether ``offset`` is in one of ``merged`` (``_merged``'s): one bisect, as an
    hour's run expires thousands of segments and checks every record below them."""
    i = bisect.bisect_right(merged, (offset, math.inf)) - 1
    return i >= 0 and merged[i][0] <= offset <= merged[i][1]


def events_summary(config: Path) -> dict[str, Any]:
    code, events, err = rlmm(config, "events")
    if code != 0:
        raise RuntimeError(f"rlmm events exited {code}: {err}")
    added: dict[str, dict[str, Any]] = {}
    finished: dict[str, int] = {}
    finished_by: dict[str, int] = {}
    deleted: set[str] = set()
    for e in events if isinstance(events, list) else [events]:
        if e["type"] == "RemoteLogSegmentMetadata":
            added[e["segment_id"]] = e
        elif e["type"] == "RemoteLogSegmentMetadataUpdate":
            if e["state"] == "COPY_SEGMENT_FINISHED":
                finished[e["segment_id"]] = e["event_timestamp_ms"]
                finished_by[e["segment_id"]] = e["broker_id"]
            elif e["state"] == "DELETE_SEGMENT_FINISHED":
                deleted.add(e["segment_id"])
    lags = sorted(
        (ts - added[sid]["max_timestamp_ms"]) / 1000 for sid, ts in finished.items() if sid in added
    )
    expired: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for sid in deleted & finished.keys():
        a = added[sid]
        expired[(a["topic"], a["partition"])].append((a["start_offset"], a["end_offset"]))

    def pct(q: float) -> float | None:
        return round(lags[min(len(lags) - 1, math.ceil(q * len(lags)) - 1)], 2) if lags else None

    return {
        "events": len(events) if isinstance(events, list) else 1,
        "segments_copied": len(finished),
        "segments_expired": len(deleted & finished.keys()),
        "copy_starts_abandoned": len(set(added) - finished.keys()),
        "copy_lag_s": {"p50": pct(0.5), "p99": pct(0.99), "max": lags[-1] if lags else None},
        "expired_ranges": expired,
        "added": added,
        "finished": finished,
        "finished_by": finished_by,
        "deleted": deleted,
    }


def growth_per_hour(samples: list[Sample], column: int, since: float | None = None) -> float | None:
    """Least-squares slope of ``column`` per hour over the last incarnation's samples
    after its first 60 s (start-up allocations are not growth), and from ``since`` (a
    monotonic time) when given."""
    if not samples:
        return None
    gen = samples[-1][1]
    mine = [s for s in samples if s[1] == gen]
    start = max(mine[0][0] + 60, since or 0.0)
    points = [(s[0], s[column]) for s in mine if s[0] >= start]
    if len(points) < 5:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return slope * 3600


def leftovers(work: Path) -> list[str]:
    """Processes started by this run still alive: children, or anything naming ``work``
    but this process and those it runs under (``timeout``, a shell)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
    ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    for p in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            line = " ".join(p.info["cmdline"] or ())
            if str(work) in line and p.pid not in ours:
                found.append(f"{p.pid} {line[:200]}")
    return sorted(set(found))


async def cancelled_by_sigterm(run: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """``run``, cancelled by a SIGTERM as by Ctrl-C: it stops the processes it started
    (brokers, sidecars, S3, Prometheus run in sessions of their own, which a signal to
    this process alone does not reach)."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run


# --- the run ----------------------------------------------------------------------


async def wait_checkpoint(log_dirs: list[Path], ends: dict[tuple[str, int], int]) -> None:
    """Until Kafka checkpointed a high watermark past every ``ends`` offset in every log
    dir (the sidecar copies nothing above the checkpointed one)."""
    async with asyncio.timeout(60):
        while True:
            marks = [read_offset_checkpoint(d / "replication-offset-checkpoint") for d in log_dirs]
            if all(m.get(tp, -1) > end for m in marks for tp, end in ends.items()):
                return
            await asyncio.sleep(0.5)


async def roll(bootstrap: str, topics: list[Topic], segment_ms: int) -> dict[tuple[str, int], int]:
    """After segment.ms, one record per partition: every earlier segment rolls. Returns
    those records' offsets (the archive ends below them)."""
    await asyncio.sleep(segment_ms / 1000 + 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        return {
            (t.name, p): (await producer.send_and_wait(t.name, b"roll", partition=p)).offset
            for t in topics
            for p in range(t.partitions)
        }
    finally:
        await producer.stop()


@dataclass
class Replicated:
    """The replicated mode's parts (``--brokers`` > 1)."""

    cluster: ApacheKafkaCluster
    logs: Path
    watch: LeaderWatch
    ledger: BatchLedger
    metrics: SidecarMetrics
    chaos: BrokerChaos


async def soak(s: Settings, work: Path) -> dict[str, Any]:
    tally = Tally()
    topics = s.topics()
    failures: list[str] = []
    report: dict[str, Any] = {"machine": machine(), "settings": {
        **{k: v for k, v in asdict(s).items() if k not in ("work", "keep")},
        "alert_scale": s.scale, "topics": [asdict(t) for t in topics]}}  # fmt: skip
    logs = work / "logs"
    logs.mkdir(parents=True)
    overrides = {
        "remote.log.storage.system.enable": "false",  # rlmm's topic, not Kafka's RLMM
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "5000",
        "replica.high.watermark.checkpoint.interval.ms": "1000",
        "transaction.state.log.segment.bytes": "1048576",
    }
    broker: ApacheKafkaBroker | None = None
    cluster: ApacheKafkaCluster | None = None
    if s.brokers > 1:
        cluster = ApacheKafkaCluster(work / "kafka", nodes=s.brokers, overrides=overrides)
        log_dirs = {n: cluster.log_dir(n) for n in cluster.ids}
    else:
        broker = ApacheKafkaBroker(work / "kafka", overrides=overrides)
        log_dirs = {1: broker.data_dir}
    with contextlib.ExitStack() as stack:
        if cluster is not None:
            stack.callback(cluster.close)
            for node in cluster.ids:
                stack.callback(cluster.kill, node)  # first: no controlled shutdown to wait
        else:
            assert broker is not None
            stack.callback(broker.kill)
        s3: FaultyS3 = stack.enter_context(faulty_s3(logs, rate=0.0, slow_s=4.0, seed=s.seed))
        import boto3

        boto3.client("s3", endpoint_url=s3.moto_url, **_boto_keys()).create_bucket(Bucket=BUCKET)
        if cluster is not None:
            await asyncio.to_thread(cluster.start)
            bootstrap = cluster.bootstrap
        else:
            assert broker is not None
            await asyncio.to_thread(broker.start)
            bootstrap = broker.bootstrap
        log(f"brokers {bootstrap}; S3 {s3.url} (moto {s3.moto_url}); work {work}")
        await create_topics(bootstrap, topics, s.brokers)
        if cluster is not None:
            # One config per node (its own data dir; its broker id from meta.properties),
            # and the observer's, which the end checks read the archive through.
            configs = {n: sidecar_config(work, s, bootstrap, s3.url, str(n)) for n in cluster.ids}
            config = sidecar_config(work, s, bootstrap, s3.url, "observer")
            sidecars = [Sidecar(configs[n], s, logs, tally, log_dirs[n], n) for n in cluster.ids]
        else:
            config = sidecar_config(work, s, bootstrap, s3.url)
            configs = {1: config}
            sidecars = [Sidecar(config, s, logs, tally, log_dirs[1])]
        prom: PrometheusServer | None = None
        try:
            tools = prometheus_tools()
            (work / "prometheus").mkdir()
            (work / "prometheus" / "rules.yml").write_text(scaled_rules(s.scale))
            targets = ", ".join(f'"127.0.0.1:{sc.port}"' for sc in sidecars)
            prom = stack.enter_context(run_prometheus(tools, f"""
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files: [rules.yml]
scrape_configs:
  - job_name: rlmm-soak
    static_configs: [{{targets: [{targets}]}}]
""", work / "prometheus"))  # fmt: skip
        except PrometheusUnavailable as e:
            failures.append(f"Prometheus unavailable ({e}): alert and dashboard not checked")
        for sc in sidecars:
            stack.callback(sc.terminate, 10)

        load, truth = Load(bootstrap, s, tally), Truth(bootstrap, topics, tally)
        started = time.monotonic()
        at = lambda f: started + f * s.duration_s  # noqa: E731
        sample_logs = {"1" if sc.node is None else str(sc.node): sc.sample_log for sc in sidecars}
        write_run(work, s, started, sample_logs)
        consumers = [asyncio.create_task(truth.consume(lv)) for lv in truth.records]
        producers = load.tasks()
        await asyncio.to_thread(s3.faults, rate=s.fault_rate)
        for sc in sidecars:
            sc.spawn()
        killer = asyncio.create_task(
            sidecars[0].killer(at(s.kills_end), (at(s.storm[0]), at(s.storm[1])), sidecars[1:])
        )
        side_tasks = [
            *(asyncio.create_task(sc.supervise()) for sc in sidecars),
            *(asyncio.create_task(sc.sample()) for sc in sidecars),
            killer,
        ]
        stop_watch = asyncio.Event()
        if prom is not None:
            side_tasks.append(asyncio.create_task(watch_alerts(prom, tally, stop_watch)))
        rep: Replicated | None = None
        watch_stop = asyncio.Event()
        watch_tasks: list[asyncio.Task[None]] = []
        chaos_task: asyncio.Task[None] | None = None
        if cluster is not None:
            watch = LeaderWatch(cluster, [t.name for t in topics])
            await asyncio.to_thread(watch.poll_once)
            tps = [(t.name, p) for t in topics for p in range(t.partitions)]
            rep = Replicated(
                cluster, logs, watch, BatchLedger(log_dirs, tps), SidecarMetrics(len(tps)),
                BrokerChaos(cluster, watch, random.Random(s.seed + 3), s.broker_down_s,
                            s.chaos_pause_s, lambda m: log(f"chaos: {m}")),
            )  # fmt: skip
            watch_tasks = [
                asyncio.create_task(rep.watch.run(watch_stop)),
                asyncio.create_task(rep.ledger.run(watch_stop)),
                asyncio.create_task(rep.metrics.run(sidecars, watch_stop)),
            ]
            chaos_task = asyncio.create_task(rep.chaos.run(at(s.chaos[0]), at(s.chaos[1])))
        wall: dict[str, int] = {}

        async def schedule() -> dict[str, float]:
            marks = {}
            await asyncio.sleep(max(0, at(s.storm[0]) - time.monotonic()))
            if not s.kills_in_storm:
                for sc in sidecars:
                    if sc.kill_point:
                        sc.kill()  # it would kill itself in the storm; respawned without
            await asyncio.to_thread(s3.faults, rate=s.storm_rate, slow=0)
            marks["storm_start"] = time.monotonic()
            wall["storm_start"] = int(time.time() * 1000)
            log(f"storm: {s.storm_rate:.0%} of S3 requests meet a fault")
            await asyncio.sleep(max(0, at(s.storm[1]) - time.monotonic()))
            await asyncio.to_thread(s3.faults, rate=s.fault_rate, slow=1)
            marks["storm_end"] = time.monotonic()
            wall["storm_end"] = int(time.time() * 1000)
            log("storm over")
            if broker is not None:  # (a cluster's brokers die and return all along)
                await asyncio.sleep(max(0, at(s.broker_restart_at) - time.monotonic()))
                t0 = time.monotonic()
                log("broker: SIGKILL and restart")
                await asyncio.to_thread(broker.restart)
                tally.broker_restarts += 1
                tally.broker_restart_s = round(time.monotonic() - t0, 1)
            await asyncio.sleep(max(0, at(1.0) - time.monotonic()))
            return marks

        try:
            marks = await schedule()
            await killer  # done by kills_end
            if chaos_task is not None:
                await chaos_task  # every node runs, every ISR full, preferred leaders lead
            # The end: no more faults, no more records; the sidecars stop gracefully.
            await asyncio.to_thread(s3.faults, rate=0)
            load.stopping.set()
            await asyncio.gather(*producers)
            if prom is not None:
                # Errors count for the rules' window after the last one (and the broker
                # restart makes some): the alert must be quiet again, within bounds.
                await wait_quiet(tally, 150 * s.scale + 30)
                await asyncio.sleep(6)  # a few more scrapes of a healthy sidecar
                report["dashboard"] = await asyncio.to_thread(
                    dashboard_queries, prom, "rlmm-soak", 120 * s.scale + 30
                )
                if report["dashboard"]["without_data"]:
                    failures.append(f"dashboard queries without data: {report['dashboard']}")
            stop_watch.set()
            watch_stop.set()
            for sc in sidecars:
                sc.stopping.set()
            await asyncio.gather(*side_tasks, *watch_tasks)
            exits = {sc.node or 1: await asyncio.to_thread(sc.terminate) for sc in sidecars}
            report["sidecar_sigterm_exit"] = (
                exits[1] if cluster is None else {str(n): c for n, c in exits.items()}
            )
            if any(code != 0 for code in exits.values()):
                failures.append(f"sidecar SIGTERM exit {report['sidecar_sigterm_exit']}")
            # The last segments roll; the consumers read everything.
            rolls = await roll(bootstrap, topics, s.segment_ms)
            await wait_checkpoint(list(log_dirs.values()), rolls)
            await truth.caught_up()
            truth.stopping.set()
            await asyncio.gather(*consumers)
            log("producers stopped, segments rolled, consumers caught up")
        finally:
            load.stopping.set()
            truth.stopping.set()
            for sc in sidecars:
                sc.stopping.set()
            stop_watch.set()
            watch_stop.set()
            tasks = [*producers, *consumers, *side_tasks, *watch_tasks]
            if chaos_task is not None:
                tasks.append(chaos_task)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # A round killed right after an upload leaves a copy STARTED with its objects:
        # verify must find it and gc --apply remove exactly it. Then one clean round
        # (on every node: each leads its own partitions).
        crash_node = 1 if rep is None else max(log_dirs, key=lambda n: len(rep.watch.led_by(n)))
        code, _out, err = await asyncio.to_thread(
            rlmm, configs[crash_node], "offload", "--once", "--log-dir",
            str(log_dirs[crash_node]), env={KILL_ENV: "copy.after_upload@2"},
        )  # fmt: skip
        report["crashed_round_exit"] = code
        (logs / "sidecar-crashed-round.log").write_text(err)  # (logged_ranges reads it)
        log(f"crashed round (node {crash_node}): exit {code}")
        # (Not --deep: a stuck copy is found from the metadata and a listing; the deep
        # read of every object comes after the clean round.)
        code, first, err = await asyncio.to_thread(rlmm, config, "verify",
                                                   "--safety-window", "0s")  # fmt: skip
        problems = [(p["kind"], p.get("segment_id"), p.get("object_name")) for p in
                    (first or {}).get("problems", [])]  # fmt: skip
        code_gc, gc, err_gc = await asyncio.to_thread(rlmm, config, "gc", "--apply",
                                                      "--safety-window", "0s")  # fmt: skip
        done = [(a["kind"], a.get("segment_id"), a.get("object_name")) for a in
                (gc or {}).get("done", [])]  # fmt: skip
        log(f"verify: {len(problems)} problem(s); gc --apply: {len(done)} done")
        round_started_ms = int(time.time() * 1000)
        rounds = {}
        for node in sorted(configs):
            code, last_round, err = await asyncio.to_thread(
                rlmm, configs[node], "offload", "--once", "--log-dir", str(log_dirs[node])
            )
            rounds[node] = {"exit": code, **(last_round or {})}
            (logs / f"sidecar-final-round-{node}.log").write_text(err)
            if code != 0 or (last_round or {}).get("errors"):
                failures.append(f"final round (node {node}): exit {code}, {last_round}, {err}")
        report["final_round"] = (
            rounds[1] if cluster is None else {str(n): r for n, r in rounds.items()}
        )
        # Reads every object back: the archive, and so the time, grows with the run.
        code2, second, err2 = await asyncio.to_thread(
            rlmm, config, "verify", "--deep", "--safety-window", "0s",
            timeout=max(300.0, s.duration_s),
        )  # fmt: skip
        kinds: dict[str, int] = defaultdict(int)
        for kind, _sid, _name in problems:
            kinds[kind] += 1
        report["verify"] = {
            "leftovers_found": dict(kinds), "gc_exit": code_gc,
            "gc_removed": len(done), "gc_removed_exactly_the_leftovers": sorted(map(str, done))
            == sorted(map(str, problems)),
            "after_gc_and_clean_round": {"exit": code2, "ok": (second or {}).get("ok"),
                         "segments": (second or {}).get("segments_checked"),
                         "objects": (second or {}).get("objects_checked"),
                         "bytes_read": (second or {}).get("bytes_read")},
        }  # fmt: skip
        if not problems:
            failures.append(f"verify found no leftover of the crashed round: {first}, {err}")
        if code_gc != 0 or not report["verify"]["gc_removed_exactly_the_leftovers"]:
            failures.append(f"gc --apply: exit {code_gc}, {gc}, {err_gc}; verify: {first}")
        if code2 != 0 or not (second or {}).get("ok"):
            failures.append(f"verify after gc: exit {code2}, {second}, {err2}")

        log("clean round and verify done")
        # What the archive holds against what the consumers read.
        events = await asyncio.to_thread(events_summary, config)
        missed = logged_ranges(logs, MISSED)
        comparison = await asyncio.to_thread(
            compare, truth, config, topics, rolls, events["expired_ranges"], missed,
            logged_ranges(logs, SKIPPED),
        )  # fmt: skip
        log(f"compared {comparison['compared']} records")
        # Remote retention: nothing past it is left, in the metadata or the bucket.
        code, listing, err = await asyncio.to_thread(rlmm, config, "segments", "list")
        live = (listing or {}).get("segments", [])
        overdue = [
            seg["segment_id"] for seg in live for t in topics
            if seg["topic"] == t.name and t.remote_retention_ms >= 0
            and seg["max_timestamp_ms"] < round_started_ms - t.remote_retention_ms
        ]  # fmt: skip
        objects = _bucket_names(s3.moto_url)
        expired_ids = events["deleted"]
        expired_objects = [n for n in objects if any(sid in n for sid in expired_ids)]
        report["retention"] = {
            "segments_expired": events["segments_expired"], "overdue_in_metadata": overdue,
            "expired_objects_in_bucket": expired_objects[:10], "objects_in_bucket": len(objects),
            "segments_live": len(live),
        }  # fmt: skip
        if overdue or expired_objects:
            failures.append(f"remote retention: {report['retention']}")
        if events["segments_expired"] == 0:
            failures.append("remote retention expired nothing: the run was too short")
        for key in ("lost", "duplicates", "mismatched"):
            if comparison[key]:
                failures.append(f"records {key}: {comparison[key]}")
        if comparison["missed_by_broker"]:
            failures.append(
                f"records deleted by the broker's local retention before they were copied:"
                f" {comparison['missed_by_broker']} (the sidecar reported {missed}; the copy"
                f" lag, max {events['copy_lag_s']['max']} s, outran the local retention of"
                f" {[t.local for t in topics]}: this machine was too slow for the settings)"
            )
        if comparison["compared"] == 0:
            failures.append("no record compared")

        report.update({
            "duration_s": round(time.monotonic() - started, 1),
            "brokers": s.brokers,
            "lost": comparison["lost"],
            "duplicated": comparison["duplicates"],
            "records_produced": dict(tally.produced),
            "records_consumed": {lv: sum(map(len, r.values())) for lv, r in truth.records.items()},
            "send_errors": tally.send_errors,
            "transactions": dict(tally.transactions),
            "records_compared": comparison["compared"],
            "records_lost": comparison["lost"],
            "records_missed_by_broker": comparison["missed_by_broker"],
            "records_skipped_past_retention": comparison["skipped_past_retention"],
            "duplicates": comparison["duplicates"],
            "mismatched": comparison["mismatched"],
            "archived_but_unseen_by_consumer": comparison["unseen_by_consumer"],
            "consumer_resets": tally.consumer_resets,
            "partitions": comparison["partitions"],
            "segments_copied": events["segments_copied"],
            "segments_expired": events["segments_expired"],
            "copy_starts_abandoned": events["copy_starts_abandoned"],
            "copy_lag_s": events["copy_lag_s"],
            "kills": {"total": tally.kills_external + sum(tally.kills_at_steps.values()),
                      "external": tally.kills_external, "at_steps": dict(tally.kills_at_steps)},
            "sidecar_starts": tally.sidecar_starts,
            "sidecar_exits": dict(tally.sidecar_exits),
            "broker_restarts": tally.broker_restarts if rep is None else rep.chaos.restarts,
            "broker_restart_s": tally.broker_restart_s,
            "faults_injected": (await asyncio.to_thread(s3.faults))["counts"],
            "s3_requests": (await asyncio.to_thread(s3.faults))["requests"],
        })  # fmt: skip
        report["resources"] = resources_from(work)  # the samples, read back from disk
        if rep is not None:
            report.update(await asyncio.to_thread(
                replicated_figures, rep, events, (wall["storm_start"], wall["storm_end"]),
                configs, failures, (await asyncio.to_thread(s3.faults))["put_bytes"],
            ))  # fmt: skip
            first = report["leadership_change_to_first_copy_s"]
            report["targets"] = {
                "lost_and_duplicated_are_0": report["lost"] == report["duplicated"] == 0,
                "bytes_uploaded_over_one_replica_le_1.05":
                    report["bytes_uploaded_over_one_replica"] is not None
                    and report["bytes_uploaded_over_one_replica"] <= 1.05,
                "leadership_change_to_first_copy_max_le_2_task_intervals":
                    first["max"] is not None and first["max"] <= first["target_s"],
            }  # fmt: skip
        report["alert"] = _alert_report(tally, marks, s, prom is not None, failures)

    report["leftover_processes"] = leftovers(work)
    if report["leftover_processes"]:
        failures.append(f"processes outlived the run: {report['leftover_processes']}")
    report["failures"] = failures
    report["ok"] = not failures
    return report


def replicated_figures(
    rep: Replicated, events: dict[str, Any], storm_ms: tuple[int, int],
    configs: dict[int, Path], failures: list[str], put_bytes: dict[str, int],
) -> dict[str, Any]:  # fmt: skip
    """The replicated run's figures: bytes uploaded over one replica (by the attempts'
    metadata, and as the S3 proxy received them), leadership change to the new leader's
    first copy, what moved leadership and what the sidecars said."""
    rep.ledger.scan_once()  # the segments the end rolled
    interval_s = load_config(configs[min(configs)], env={}).offload[
        "remote.log.manager.task.interval.ms"] / 1000  # fmt: skip
    figures = bytes_figures(
        events["added"], events["finished"], rep.ledger, storm_ms, rep.watch.changes
    )
    # What went over the wire: every PUT body of a log segment object the proxy got,
    # refused ones included. The attempts' count above charges a failed attempt its
    # whole segment, whatever it sent; a copy's own tries send only what had not landed.
    one = figures["one_replica_bytes"]
    figures["log_bytes_sent_to_s3"] = put_bytes["log"]
    figures["log_bytes_sent_to_s3_over_one_replica"] = (
        round(put_bytes["log"] / one, 4) if one else None
    )
    figures["other_object_bytes_sent_to_s3"] = put_bytes["other"]
    first = first_copy_figures(
        rep.watch.changes, events["added"], events["finished"], events["finished_by"],
        interval_s, int(time.time() * 1000), storm_ms,
    )  # fmt: skip
    causes: dict[str, int] = defaultdict(int)
    for c in rep.watch.changes:
        causes[c.cause] += 1
    (rep.logs / "leader-changes.json").write_text(
        json.dumps([asdict(c) for c in rep.watch.changes], indent=1)
    )
    if first["never_copied"]:
        failures.append(f"no copy by the new leader after a change: {first['never_copied']}")
    if figures["segments_measured"]["unmeasured"]:
        failures.append(f"copied segments not found in any log dir: {figures['segments_measured']}")
    return {
        "bytes_uploaded_over_one_replica": figures["ratio"],
        "bytes_uploaded": figures,
        "leadership_change_to_first_copy_s": first,
        "leadership": {
            **rep.chaos.report(),
            "changes_seen": len(rep.watch.changes),
            "changes_by_cause": dict(causes),
            "polls_with_a_leaderless_partition": rep.watch.leaderless_polls,
            "sidecar_metrics": rep.metrics.report(),
        },
    }  # fmt: skip


def _boto_keys() -> dict[str, str]:
    return {"region_name": "us-east-1", "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing"}  # fmt: skip


def _bucket_names(moto_url: str) -> list[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=moto_url, **_boto_keys())
    names: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        names.extend(o["Key"] for o in page.get("Contents", []))
    return names


def _resources(samples: list[Sample], half: float, last_quarter: float) -> dict[str, Any]:
    """The sidecar's RSS and fds; ``half`` is the run's midpoint (monotonic): issue 27's
    target is the RSS growth over the last half of the run. The last quarter's fit is
    beside it: the half starts with the storm's copy backlog, whose working set the
    allocator keeps, so the half's fit mixes that rise with the steady state."""
    last = [x for x in samples if samples and x[1] == samples[-1][1]]
    mib = 1 << 20
    rss = growth_per_hour(samples, 2)
    rss_half = growth_per_hour(samples, 2, since=half)
    rss_quarter = growth_per_hour(samples, 2, since=last_quarter)
    fds = growth_per_hour(samples, 3)
    every_5_min = [x for i, x in enumerate(last) if i % 150 == 0][-24:]  # samples are 2 s apart
    every_min = [x for i, x in enumerate(last) if i % 30 == 0][-120:]
    return {
        "samples": len(samples),
        "last_incarnation_s": round(last[-1][0] - last[0][0], 1) if last else None,
        "rss_mib": {
            "max": round(max(x[2] for x in samples) / mib, 1) if samples else None,
            "last_start": round(last[0][2] / mib, 1) if last else None,
            "last_end": round(last[-1][2] / mib, 1) if last else None,
            "growth_mib_per_hour": None if rss is None else round(rss / mib, 1),
            "growth_last_half_mib_per_hour": None if rss_half is None else round(rss_half / mib, 1),
            "growth_last_quarter_mib_per_hour": (
                None if rss_quarter is None else round(rss_quarter / mib, 1)
            ),
            "last_every_5_min": [round(x[2] / mib, 1) for x in every_5_min],
            "last_every_min": [round(x[2] / mib, 1) for x in every_min],
        },
        "fds": {
            "max": max(x[3] for x in samples) if samples else None,
            "last_start": last[0][3] if last else None,
            "last_end": last[-1][3] if last else None,
            "growth_per_hour": None if fds is None else round(fds, 1),
        },
    }


def _alert_report(
    tally: Tally, marks: dict[str, float], s: Settings, watched: bool, failures: list[str]
) -> dict[str, Any]:
    if not watched:
        return {"checked": False}
    storm_start, storm_end = marks["storm_start"], marks["storm_end"]
    firing = [t for t, state in tally.alert_states if state == "firing"]
    fired_at = firing[0] if firing else None
    final_t, final_state = tally.alert_states[-1] if tally.alert_states else (0.0, "")
    out = {
        "checked": True, "rules_time_scale": s.scale,
        "fired_s_after_storm_start": None if fired_at is None else round(fired_at - storm_start, 1),
        "firing_spells": len(firing),
        # The last change, to inactive for good (negative: it went quiet before the
        # storm ended, a sidecar restarting often pauses its errors).
        "resolved_s_after_storm_end": round(final_t - storm_end, 1)
        if final_state == "inactive" and fired_at is not None else None,
        "transitions": [(round(t - storm_start, 1), state) for t, state in tally.alert_states],
        "alert": STORM_ALERT,
        # Reported, not checked: copies wait out the storm, so few of them fail.
        COPY_ALERT: [(round(t - storm_start, 1), state) for t, state in tally.copy_alert_states],
    }  # fmt: skip
    if fired_at is None or not storm_start < fired_at <= storm_end + 4:
        failures.append(f"{STORM_ALERT} did not fire during the storm: {out}")
    elif out["resolved_s_after_storm_end"] is None:
        failures.append(f"{STORM_ALERT} did not resolve after the storm: {out}")
    return out


@dataclass
class WorkDir:
    """A run's work dir; ``failed`` keeps it (a report that is not ok sets it)."""

    path: Path
    failed: bool = False


@contextlib.contextmanager
def workdir(s: Settings) -> Iterator[WorkDir]:
    """The run's work dir, removed at the end unless ``--keep``, or the run failed (an
    exception, or a report with failures): then its samples and logs are kept for a
    look and for ``--report-from``."""
    work = WorkDir(s.work or Path(tempfile.mkdtemp(prefix="rlmm-soak-")))
    try:
        yield work
    except BaseException:
        work.failed = True
        raise
    finally:
        if work.failed:
            log(f"the run failed: its work dir is kept, {work.path} (python bench/soak.py"
                f" --report-from {work.path} reports its samples)")  # fmt: skip
        elif not s.keep:
            shutil.rmtree(work.path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--rate", type=float, default=200.0, help="records/s, all producers")
    parser.add_argument("--fault-rate", type=float, default=0.03)
    parser.add_argument("--storm-rate", type=float, default=0.9)
    parser.add_argument(
        "--alert-scale", type=float, default=None,
        help="multiply the alert rules' windows by this (default: duration / 600)",
    )  # fmt: skip
    parser.add_argument(
        "--copy-retry-s", type=float, default=None,
        help="the sidecars' [remote] copy_retry_s (default: 30 s times the alert scale; 0: "
        "a copy fails once the S3 client's retries ran out, as before it existed)",
    )  # fmt: skip
    parser.add_argument(
        "--kills-in-storm", action=argparse.BooleanOptionalAction, default=True,
        help="SIGKILL the sidecar during the storm too (a short run cannot, and still see "
        "the storm's alert fire within its short windows: each restart begins unpaused)",
    )  # fmt: skip
    parser.add_argument(
        "--storm", default="0.08,0.5", help="start,end of the storm, fractions of the run"
    )
    parser.add_argument("--broker-restart-at", type=float, default=0.55, help="fraction")
    parser.add_argument(
        "--brokers", type=int, default=1, choices=(1, 3),
        help="3: a three-node cluster, replication factor 3, a sidecar per node, broker "
        "kills and preferred elections through the run (default 1: one broker)",
    )  # fmt: skip
    parser.add_argument("--kills-end", type=float, default=0.55, help="fraction: no kill after")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--work", type=Path, default=None, help="work dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    parser.add_argument(
        "--report-from", type=Path, metavar="WORK", default=None,
        help="run nothing: report the RSS and fd samples a previous run left in its work"
        " dir WORK (kept by --keep, by a run that failed, or by one that was killed)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.report_from is not None:
        if not (args.report_from / RUN_FILE).exists():
            parser.error(f"--report-from {args.report_from}: no {RUN_FILE} (not a soak's work dir)")
        print(json.dumps(saved_report(args.report_from), indent=2, default=str))
        return 0
    start, _, end = args.storm.partition(",")
    storm = (float(start), float(end))
    if not 0 <= storm[0] < storm[1] <= 1:
        parser.error(f"--storm {args.storm}: want start,end with 0 <= start < end <= 1")
    s = Settings(
        duration_s=args.duration, rate=args.rate, fault_rate=args.fault_rate,
        storm_rate=args.storm_rate, seed=args.seed, work=args.work, keep=args.keep,
        kills_in_storm=args.kills_in_storm, alert_scale=args.alert_scale,
        copy_retry_s=args.copy_retry_s,
        storm=storm, broker_restart_at=args.broker_restart_at, kills_end=args.kills_end,
        brokers=args.brokers,
    )  # fmt: skip
    # The producers' and consumers' retries while the broker restarts are expected;
    # the report counts them.
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    os.environ.update(AWS_ENV)  # this process reads the archive too
    with workdir(s) as work:
        try:
            report = asyncio.run(cancelled_by_sigterm(soak(s, work.path)))
        except asyncio.CancelledError:
            log("stopped by SIGTERM; the run's processes are stopped")
            return 128 + signal.SIGTERM
        work.failed = not report["ok"]
        if s.keep or work.failed:
            report["work"] = str(work.path)
    print(json.dumps(report, indent=2, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
