"""Brokers for bench/plugin.py: one Apache Kafka 4.1.1 node per side, the same settings,
only the tiered-storage plugins swapped.

Sides: ``kafka`` (the fixture's default: Kafka's TopicBasedRemoteLogMetadataManager and
LocalTieredStorage), ``rlmm-local`` (rlmm's RSM and RLMM through the JVM bridge, rlmm's
local store) and ``rlmm-s3`` (the same over moto's S3 server on 127.0.0.1).

Also: the broker log read incrementally with each line's own timestamp (Kafka's RLM
logs the same lines whichever plugin it loads, which is what makes the sides
comparable), synthetic but valid segment events written straight into
``__remote_log_metadata``, and /proc samples of a process's CPU and RSS.

Invariant: every broker is stopped by ``stop_broker`` (also on error, by the caller's
``finally``), and no ``rlmm serve`` it started outlives it (SIGKILLed if it does, and
said so).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from rlmm.codec import encode
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for
from tests.fixtures.apache_kafka import (
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    ApacheKafkaBroker,
)
from tests.fixtures.kafka import kafka_answers
from tests.fixtures.kafka_plugin import JAR, plugin_config, plugin_overrides, serve_pids
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("kafka", "rlmm-local", "rlmm-s3", "rlmm-local-nofsync")
S3_BUCKET = "rlmm-bench-tier"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
LOGS_CLOSED = "Shutdown complete. (kafka.log.LogManager)"
_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] (\w+) (.*)$")


def build_plugin_jar() -> Path:
    """``make -s plugin`` (what the test suite runs): the jar of this checkout."""
    done = subprocess.run(
        ["make", "-s", "plugin"], cwd=ROOT, capture_output=True, text=True, timeout=900,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0 or not JAR.is_file():
        raise RuntimeError(f"make plugin failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return JAR


def s3_config(root: Path, endpoint: str) -> Path:
    """rlmm's TOML for the S3 side: the same as the fixture's, the store on moto.
    Credentials come from the environment (S3_ENV), which the broker's JVM and the
    ``rlmm serve`` it starts inherit."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "rlmm.toml"
    path.write_text(
        f'data_dir = "{root / "rlmm-data"}"\n[remote]\ntype = "s3"\nbucket = "{S3_BUCKET}"\n'
        f'endpoint_url = "{endpoint}"\nregion = "us-east-1"\n'
    )
    return path


def serve_wrapper(root: Path, metrics_port: int) -> Path:
    """The command the bridge starts ``rlmm serve`` with: the fixture's (this venv's
    interpreter, ``-m rlmm.cli``) plus ``--metrics-port``, appended after the bridge's
    ``serve`` arguments, so the bench can read the serve's per-method call counters."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "rlmm-serve.sh"
    path.write_text(
        f'#!/bin/sh\nexec {sys.executable} -m rlmm.cli "$@" --metrics-port {metrics_port}\n'
    )
    path.chmod(0o755)
    return path


def side_overrides(side: str, root: Path, settings: dict[str, str], s3: str | None) -> dict:
    """``server.properties`` overrides of ``side`` over the fixture's defaults."""
    if side == "kafka":
        return dict(settings)
    if side == "rlmm-local":
        props = plugin_overrides(JAR, plugin_config(root), **settings)
    elif side == "rlmm-local-nofsync":  # the same store without its object and dir fsyncs
        config = plugin_config(root)
        config.write_text(config.read_text() + "fsync = false\n")
        props = plugin_overrides(JAR, config, **settings)
    elif side == "rlmm-s3":
        assert s3 is not None, "the S3 side needs moto's endpoint"
        props = plugin_overrides(JAR, s3_config(root, s3), **settings)
    else:
        raise ValueError(f"unknown side {side!r}")
    port_file = root / "metrics.port"
    if not port_file.exists():
        root.mkdir(parents=True, exist_ok=True)
        port_file.write_text(str(free_port()))
    wrapper = str(serve_wrapper(root, int(port_file.read_text())))
    props["rsm.config.command"] = props["rlmm.config.command"] = wrapper
    return props


def metrics_port(broker: ApacheKafkaBroker) -> int | None:
    path = broker.root / "metrics.port"
    return int(path.read_text()) if path.exists() else None


_SAMPLE = re.compile(
    r"^(rlmm_serve_calls_total|rlmm_serve_call_errors_total|rlmm_remote_fetch_bytes_total"
    r"|rlmm_remote_copy_bytes_total)\{(.*)\} (\S+)$"
)


def serve_calls(broker: ApacheKafkaBroker) -> dict[str, float] | None:
    """``rlmm serve``'s call counters per method (errors as ``error:<method>:<type>``),
    from its metrics port; None if it does not answer."""
    import urllib.request

    port = metrics_port(broker)
    if port is None:
        return None
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return None
    out: dict[str, float] = {}
    for line in text.decode().splitlines():
        m = _SAMPLE.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            if m.group(1).startswith("rlmm_remote_"):  # bytes, summed over topics
                key = m.group(1).removeprefix("rlmm_remote_").removesuffix("_total")
                out[key] = out.get(key, 0.0) + float(m.group(3))
                continue
            key = labels["method"]
            if m.group(1).startswith("rlmm_serve_call_errors"):
                key = f"error:{key}:{labels.get('type')}"
            out[key] = float(m.group(3))
    return out


def new_broker(
    side: str, root: Path, settings: dict[str, str], heap: str, s3: str | None = None
) -> ApacheKafkaBroker:
    if side == "rlmm-s3":
        os.environ.update(S3_ENV)
    return ApacheKafkaBroker(root, overrides=side_overrides(side, root, settings, s3), heap=heap)


def swap_side(broker: ApacheKafkaBroker, side: str, settings: dict[str, str]) -> None:
    """The next start of ``broker`` (same data, ports, cluster) loads ``side``'s plugins."""
    broker.overrides = side_overrides(side, broker.root, settings, None)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running (a zombie is not)."""
    state = _state(pid)
    return state is not None and state != "Z"


def stop_broker(broker: ApacheKafkaBroker, timeout: float = 90.0) -> dict[str, Any]:
    """Controlled shutdown that lets ``rlmm serve`` finish (its final snapshot): SIGTERM
    to the broker's process group, then wait until the JVM exits, or until its logs are
    closed and no serve is alive (2 s after, as the fixture does: Kafka's own RLMM keeps
    the JVM up for a minute retrying a closed listener); SIGKILL the group after that or
    ``timeout``. Returns what happened (serve pids SIGKILLed, seconds taken)."""
    if broker.process is None:
        return {}
    pids = sorted({p for p in serve_pids(broker) if alive(p)})
    t0 = time.monotonic()
    mark = broker._log_size()
    broker._signal_group(signal.SIGTERM)
    broker._signal_group(signal.SIGCONT)
    closed_at: float | None = None
    while broker.process.poll() is None and time.monotonic() - t0 < timeout:
        serving = [p for p in pids if alive(p)]
        if closed_at is None and LOGS_CLOSED in broker._log_text(since=mark):
            closed_at = time.monotonic()
        if closed_at is not None and not serving and time.monotonic() > closed_at + 2:
            break
        time.sleep(0.1)
    jvm_exited = broker.process.poll() is not None
    # A serve outlives the JVM by design for a moment (it watches the broker's pid and
    # then closes: final snapshot); it is in the broker's process group, so it must be
    # gone before the group is SIGKILLed.
    serve_wait = time.monotonic()
    while any(alive(p) for p in pids) and time.monotonic() - serve_wait < 30:
        time.sleep(0.1)
    serve_exit_s = time.monotonic() - serve_wait
    left = [p for p in pids if alive(p)]
    broker.kill()  # SIGKILL the group (a no-op once it is gone), reap, drop the guard
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return {
        "stop_s": round(time.monotonic() - t0, 1),
        "jvm_exited_by_itself": jvm_exited,
        "serve_exit_after_s": round(serve_exit_s, 1) if pids else None,
        "serve_pids": pids,
        "serve_sigkilled": left,
    }


# -- the broker log -----------------------------------------------------------------------


def log_time(stamp: str) -> float:
    """A log4j ``%d`` stamp (local time, ms) as epoch seconds."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass
class LogTail:
    """New lines of the broker log since ``offset``, each with its logged time."""

    path: Path
    offset: int = 0
    _rest: bytes = b""

    def lines(self) -> Iterator[tuple[float, str]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        data = self._rest + data
        *complete, self._rest = data.split(b"\n")
        for raw in complete:
            m = _LINE.match(raw.decode(errors="replace"))
            if m:
                yield log_time(m.group(1)), m.group(3)


@dataclass
class PartitionLines:
    """First time each partition of ``topic`` logged a line holding ``needle``
    (Kafka's RLM names a partition ``[RemoteLogManager=1 partition=<id>:<topic>-<p>]``)."""

    topic: str
    needle: str
    seen: dict[int, float] = field(default_factory=dict)

    def feed(self, t: float, text: str) -> None:
        if self.needle not in text:
            return
        m = re.search(rf":{re.escape(self.topic)}-(\d+)\]", text)
        if m:
            self.seen.setdefault(int(m.group(1)), t)


# -- topics and synthetic events -------------------------------------------------------------


def topic_id(broker: ApacheKafkaBroker, topic: str) -> uuid.UUID:
    """The topic's id, from ``partition.metadata`` in its first partition's log dir."""
    path = broker.data_dir / f"{topic}-0" / "partition.metadata"
    deadline = time.monotonic() + 120
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear in 120 s")
        time.sleep(0.2)
    for line in path.read_text().splitlines():
        if line.startswith("topic_id:"):
            text = line.split(":", 1)[1].strip()
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    raise RuntimeError(f"no topic_id in {path}")


SEGMENT_RECORDS = 10_000
# The synthetic segments' leader epoch: above any the broker's partitions reach here.
# Kafka's RLM deletes remote segments whose epochs are all below the local log's
# earliest epoch ("leader-epoch-cache truncation"); a broker restart bumps the leader
# epoch of the (empty) partitions, so segments of epoch 0 would be deleted one by one,
# adding delete events. Segments of a later epoch than the local lineage are left
# alone (not valid for retention, never listed for an epoch the log has).
SYNTHETIC_EPOCH = 1 << 30


def segment_events(tp: TopicIdPartition, i: int, broker_id: int = 1) -> tuple[bytes, bytes]:
    """Segment ``i`` of ``tp``: COPY_SEGMENT_STARTED and its COPY_SEGMENT_FINISHED, leader
    epoch SYNTHETIC_EPOCH, Kafka's serde bytes (no object exists for it: nothing reads it)."""
    start = i * SEGMENT_RECORDS
    now = 1_700_000_000_000 + i
    m = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), start, start + SEGMENT_RECORDS - 1, now,
        broker_id, now, 1 << 20, {SYNTHETIC_EPOCH: start},
    )  # fmt: skip
    done = RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, now + 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        broker_id,
    )  # fmt: skip
    return encode(m), encode(done)


async def wait_metadata_topic(bootstrap: str, timeout: float = 120) -> None:
    """Until ``__remote_log_metadata`` exists (the side's RLMM creates it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while METADATA_TOPIC not in await admin.list_topics():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{METADATA_TOPIC} not created in {timeout} s")
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def write_events(
    bootstrap: str,
    tps: list[TopicIdPartition],
    segments: range,
    per_batch: int,
) -> dict[str, float]:
    """Segments ``segments`` of every partition in ``tps`` (2 events each) into
    ``__remote_log_metadata``, partitioned as Kafka does, ``per_batch`` events per record
    batch, segment by segment across the partitions. Returns events and seconds."""
    await wait_metadata_topic(bootstrap)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 20,
        max_request_size=1 << 20, linger_ms=5,
    )  # fmt: skip
    await producer.start()
    t0 = time.perf_counter()
    written = 0
    try:
        pending: list[asyncio.Future[Any]] = []
        batches: dict[int, Any] = {}
        counts: dict[int, int] = {}
        by_tp = {tp: metadata_partition_for(tp, METADATA_PARTITIONS) for tp in tps}

        async def flush(p: int) -> None:
            batch = batches.pop(p, None)
            if batch is not None and counts.pop(p, 0):
                pending.append(await producer.send_batch(batch, METADATA_TOPIC, partition=p))
            if len(pending) >= 64:
                await asyncio.gather(*pending)
                pending.clear()

        for i in segments:
            for tp in tps:
                p = by_tp[tp]
                for value in segment_events(tp, i):
                    if p not in batches:
                        batches[p] = producer.create_batch()
                    if batches[p].append(key=None, value=value, timestamp=None) is None:
                        await flush(p)
                        batches[p] = producer.create_batch()
                        batches[p].append(key=None, value=value, timestamp=None)
                    counts[p] = counts.get(p, 0) + 1
                    written += 1
                    if counts[p] >= per_batch:
                        await flush(p)
        for p in list(batches):
            await flush(p)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return {"events": written, "seconds": round(time.perf_counter() - t0, 1)}


# -- processes -----------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def proc_sample(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, user + system, all threads; RSS bytes) of ``pid``, None once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    rss = next(
        int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")
    )
    return (int(stat[11]) + int(stat[12])) / _TICK, rss


def sample_window(pids: dict[str, int], seconds: float, every: float = 1.0) -> dict[str, Any]:
    """CPU (% of one core over the window) and RSS (MiB: max, mean, last) per process."""
    first = {k: proc_sample(p) for k, p in pids.items()}
    t0 = time.monotonic()
    rss: dict[str, list[int]] = {k: [] for k in pids}
    while time.monotonic() - t0 < seconds:
        time.sleep(every)
        for k, p in pids.items():
            s = proc_sample(p)
            if s is not None:
                rss[k].append(s[1])
    wall = time.monotonic() - t0
    out: dict[str, Any] = {}
    for k, p in pids.items():
        last, start = proc_sample(p), first[k]
        if start is None or last is None or not rss[k]:
            out[k] = {"pid": p, "gone": True}
            continue
        out[k] = {
            "pid": p,
            "cpu_pct_of_core": round(100 * (last[0] - start[0]) / wall, 2),
            "cpu_s": round(last[0] - start[0], 2),
            "rss_mib_max": round(max(rss[k]) / 2**20, 1),
            "rss_mib_mean": round(sum(rss[k]) / len(rss[k]) / 2**20, 1),
            "rss_mib_last": round(rss[k][-1] / 2**20, 1),
        }
    out["window_s"] = round(wall, 1)
    return out


def wait_serving(broker: ApacheKafkaBroker, deadline: float) -> float:
    """Until the broker answers Metadata listing itself; the time it did (epoch s)."""
    from tests.fixtures.apache_kafka import metadata_lists_a_broker

    while time.monotonic() < deadline:
        broker.raise_if_failed()
        if kafka_answers("127.0.0.1", broker.port, timeout=0.5) and metadata_lists_a_broker(
            "127.0.0.1", broker.port
        ):
            return time.time()
        time.sleep(0.05)
    raise RuntimeError(f"the broker did not serve in time:\n{broker.log_tail(40)}")


__all__ = [
    "S3_BUCKET",
    "SIDES",
    "LogTail",
    "PartitionLines",
    "alive",
    "build_plugin_jar",
    "new_broker",
    "proc_sample",
    "sample_window",
    "segment_events",
    "stop_broker",
    "swap_side",
    "topic_id",
    "wait_serving",
    "write_events",
]


# -- asking rlmm serve directly ---------------------------------------------------------------

SERVE_AT = re.compile(r"rlmm serve pid (\d+) version \S+ at (\S+) \(")


class ServeProbe:
    """``rlmm.is_ready`` asked of a running ``rlmm serve`` over its socket, the way the
    bridge asks (length-prefixed msgpack frames); no hello, so the serve does not count
    it as a plugin class. A partition's readiness is its metadata partition's: the probe
    asks one partition per metadata partition until those are ready, then every one."""

    def __init__(self, socket_path: str, tps: list[TopicIdPartition]) -> None:
        import socket as socketlib

        self._sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        self._sock.settimeout(10)
        self._sock.connect(socket_path)
        self._ids = 0
        by_meta: dict[int, TopicIdPartition] = {}
        for tp in tps:
            by_meta[metadata_partition_for(tp, METADATA_PARTITIONS)] = tp
        self._samples = list(by_meta.values())
        self._left = list(tps)

    def close(self) -> None:
        self._sock.close()

    def _ask(self, tps: list[TopicIdPartition]) -> list[bool]:
        import msgpack

        frames = []
        first = self._ids + 1
        for tp in tps:
            self._ids += 1
            args = {"topic_id_partition": {"topic_id": tp.topic_id.bytes, "topic": tp.topic,
                                           "partition": tp.partition}}  # fmt: skip
            body = msgpack.packb({"id": self._ids, "method": "rlmm.is_ready", "args": args})
            frames.append(len(body).to_bytes(4, "big") + body)
        self._sock.sendall(b"".join(frames))
        answers: dict[int, bool] = {}
        while len(answers) < len(tps):
            size = int.from_bytes(self._read(4), "big")
            message = msgpack.unpackb(self._read(size), raw=False)
            answers[message["id"]] = message.get("result") is True
        return [answers[first + i] for i in range(len(tps))]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("rlmm serve closed the probe's socket")
            data += chunk
        return data

    def all_ready(self) -> bool:
        if self._samples:
            if not all(self._ask(self._samples)):
                return False
            self._samples = []
        left: list[TopicIdPartition] = []
        for i in range(0, len(self._left), 500):
            part = self._left[i : i + 500]
            left += [tp for tp, ok in zip(part, self._ask(part), strict=True) if not ok]
        self._left = left
        return not left
