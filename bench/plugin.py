"""Benchmark: Apache Kafka 4.1.1 tiering through rlmm's broker plugin vs Kafka's own.

One KRaft node per side (tests/fixtures/apache_kafka.py), the same broker and topic
settings, only the tiered-storage plugins swapped:
  baseline   Kafka's TopicBasedRemoteLogMetadataManager + LocalTieredStorage
             (the fixture's default broker);
  ours       rlmm's RlmmRemoteLogMetadataManager + RlmmRemoteStorageManager (the jar of
             ``make plugin``, forwarding to ``rlmm serve``) over rlmm's local store;
  ours (S3)  the same over moto's S3 server on 127.0.0.1 (figure 1 and 2, beside).
The bridge starts rlmm serve with the fixture's command plus ``--metrics-port`` (a
wrapper script in the broker's dir), so the bench reads its per-method call counters.
Figures (``--only``):
  tiering  a backlog of ``--backlog-mib`` in a topic with ``remote.log.copy.disable=true``
           (``--partitions`` partitions of ``--segment-mib`` segments; the active ones
           rolled by a record 30 min ahead), then copying switched on (AlterConfigs):
           rolled bytes / seconds from the switch to the broker log's last "Copied ...
           to remote storage" line of that topic. Target ours >= 1x baseline.
  catchup  the same topic once every tiered segment's local copy is deleted
           (local.retention.ms=1000): Kafka's ConsumerPerformance reads it all from
           offset 0 through the broker (everything but the roll records is remote);
           MB/s from the tool's fetch time (MiB/s as it counts), best of ``--repeat``.
           Target ours >= 1x.
  restart  ``--events`` synthetic but valid segment events (add STARTED + update
           FINISHED, rlmm's encoder, Kafka's partitioning) in ``__remote_log_metadata``
           for ``--restart-partitions`` partitions of a real remote-enabled topic; the
           broker restarted on the same data with each side: baseline's RLMM replays
           the topic, ours restores the snapshot its previous (clean) stop left at the
           head and replays the ``--tail`` after it. Timed from the JVM's launch: the
           broker answering Metadata; its RLMM ready for every partition (Kafka's by its
           "Initialized for all the N assigned user-partitions" line, ours by
           ``rlmm.is_ready`` asked of rlmm serve over its socket); and Kafka's RLM
           logging every partition's "Found the highest copiedRemoteOffset ... after
           becoming leader" (a copy task's first run after isReady said true: the same
           line for both). Target ours >= 20x on the RLMM's catch-up after the broker
           led the partitions.
  idle     ``--idle-partitions`` remote-enabled partitions (each with a few synthetic
           tiered segments), nothing produced: CPU and RSS of ``rlmm serve`` (/proc) over
           ``--idle-seconds`` (at least two task intervals), per RLM task interval
           (``--idle-task-interval-ms``), and its calls per second by method (its
           metrics port); the baseline column is the broker JVM with Kafka's plugins
           over the same window. Targets <= 300 MiB and <= 1% of a core.
``--quick`` scales every figure down. Prints ONE JSON document: ``results`` has one row
per figure (figure, baseline, ours, ratio, target, met, notes) and ``details`` the runs.
Every broker (and its serves) and moto are stopped at the end, also on error. Usage:
  python bench/plugin.py [--quick] [--only tiering,catchup,restart,idle] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from bench._machine import machine
from bench._plugin_brokers import (
    S3_BUCKET,
    SERVE_AT,
    LogTail,
    PartitionLines,
    ServeProbe,
    alive,
    build_plugin_jar,
    new_broker,
    proc_sample,
    sample_window,
    serve_calls,
    stop_broker,
    swap_side,
    topic_id,
    wait_serving,
    write_events,
)
from bench._topic import create_topic, local_bases, producer_performance, roll
from rlmm.model import TopicIdPartition
from tests.fixtures.apache_kafka import (
    KAFKA_VERSION,
    METADATA_PARTITIONS,
    ApacheKafkaBroker,
    run_java,
)
from tests.fixtures.kafka_plugin import serve_pids, wait_for_serve

MiB = 1 << 20
HEAP = "1g"
# The fixture's own settings stay (task interval 500 ms, retention checks every 1 s).
COMMON: dict[str, str] = {}
COPIED = "Copied "
# Topics the synthetic events are for: tiered, nothing ever expires.
SYNTHETIC_TOPIC = {"remote.storage.enable": "true", "retention.ms": "-1"}
READY_LINE = "Found the highest copiedRemoteOffset"
TASK_LINE = "Created a new copy task"
KAFKA_INIT = re.compile(
    r"Initialized for all the (\d+) assigned user-partitions mapped to the (\d+)"
    r" meta-partitions in (\d+) ms"
)
SERVE_MANAGER = "remote log metadata manager started over"


def ratio(ours: float | None, base: float | None) -> float | None:
    if not ours or not base:
        return None
    return round(ours / base, 2)


# -- figure 1 and 2: tiering a backlog, then a consumer catching up from offset 0 -----------


# Other processes of the run whose CPU counts (moto's server, while it runs).
OTHER_PIDS: dict[str, int] = {}


def pid_of(needle: str) -> int | None:
    """The first process whose command line holds ``needle``."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    return int(d.name)
            except OSError:
                continue
    return None


def usage(broker: ApacheKafkaBroker) -> dict[str, Any]:
    """CPU seconds so far of the broker JVM, of its newest live ``rlmm serve`` and of
    OTHER_PIDS, and the serve's call counters (to take differences of)."""
    assert broker.process is not None
    jvm = proc_sample(broker.process.pid)
    pids = [p for p in serve_pids(broker) if alive(p)]
    serve = proc_sample(pids[-1]) if pids else None
    others = {k: proc_sample(p) for k, p in OTHER_PIDS.items()}
    return {
        "jvm_cpu_s": None if jvm is None else jvm[0],
        "serve_cpu_s": None if serve is None else serve[0],
        "serve_pid": pids[-1] if pids else None,
        "calls": serve_calls(broker) if pids else None,
        **{f"{k}_cpu_s": None if v is None else v[0] for k, v in others.items()},
    }


def used(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What happened between two ``usage`` samples (CPU seconds, calls per method)."""

    def diff(key: str) -> float | None:
        a, b = before.get(key), after.get(key)
        return None if a is None or b is None else round(b - a, 2)

    out: dict[str, Any] = {"broker_jvm_cpu_s": diff("jvm_cpu_s")}
    for k in OTHER_PIDS:
        out[f"{k}_cpu_s"] = diff(f"{k}_cpu_s")
    if after.get("serve_pid") is not None:
        same = before.get("serve_pid") == after["serve_pid"]
        out["rlmm_serve_cpu_s"] = diff("serve_cpu_s") if same else None
        if not same:
            out["rlmm_serve_restarted"] = [before.get("serve_pid"), after["serve_pid"]]
        c0, c1 = before.get("calls") or {}, after.get("calls") or {}
        out["rlmm_serve_calls"] = {
            k: int(v - c0.get(k, 0)) for k, v in sorted(c1.items()) if v != c0.get(k, 0)
        }
    return out


def topic_configs(segment_bytes: int, copy_disabled: bool) -> dict[str, str]:
    return {
        "remote.storage.enable": "true",
        "remote.log.copy.disable": "true" if copy_disabled else "false",
        "segment.bytes": str(segment_bytes),
        "segment.ms": "600000",  # a record 30 min ahead rolls the active segment
        # Kafka refuses copy.disable unless local retention equals retention: the
        # backlog stays local (-1) until copying is switched on with local.retention 1 s.
        "local.retention.ms": "-1" if copy_disabled else "1000",
        "retention.ms": "-1",
    }


async def alter_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """AlterConfigs (not incremental: every config the topic was created with is given)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        result = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)]
        )
        for r in result:
            for code, message, *_ in r.resources:
                if code != 0:
                    raise RuntimeError(f"AlterConfigs {topic}: error {code} {message}")
    finally:
        await admin.close()


def remote_bytes(side: str, broker: ApacheKafkaBroker, topic: str, s3: str | None) -> int:
    """Bytes of every object of ``topic`` in the side's remote store (logs and indexes)."""
    if side == "kafka":
        base = broker.remote_dir / "kafka-tiered-storage"
        return sum(
            f.stat().st_size for d in base.glob(f"{topic}-*") for f in d.rglob("*") if f.is_file()
        )
    if side.startswith("rlmm-local"):
        base = broker.root / "tier"
        return sum(
            f.stat().st_size for d in base.glob(f"{topic}-*") for f in d.rglob("*") if f.is_file()
        )
    import boto3

    client = boto3.client("s3", endpoint_url=s3, region_name="us-east-1")
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET):
        total += sum(o["Size"] for o in page.get("Contents", []) if topic in o["Key"])
    return total


def tier_once(
    side: str, broker: ApacheKafkaBroker, args: argparse.Namespace, n: int, s3: str | None
) -> dict[str, Any]:
    topic = f"backlog-{n}-{uuid4().hex[:6]}"
    segment = args.segment_mib * MiB
    asyncio.run(
        create_topic(broker.bootstrap, topic, args.partitions, topic_configs(segment, True))
    )
    records = args.backlog_mib * MiB // args.record_size
    t0 = time.perf_counter()
    producer_performance(broker, topic, records, args.record_size, timeout=1800)
    produce_s = time.perf_counter() - t0
    rolls = asyncio.run(roll(broker.bootstrap, topic, args.partitions))
    rolled = {
        p: [f for f in (broker.data_dir / f"{topic}-{p}").glob("*.log") if int(f.stem) < rolls[p]]
        for p in range(args.partitions)
    }
    segments = sum(len(v) for v in rolled.values())
    rolled_bytes = sum(f.stat().st_size for v in rolled.values() for f in v)

    tail = LogTail(broker.log_path, broker._log_size())
    u0 = usage(broker)
    t_switch = time.time()
    asyncio.run(alter_topic(broker.bootstrap, topic, topic_configs(segment, False)))
    copied: list[float] = []
    copying: list[float] = []
    needle = f":{topic}-"
    deadline = time.monotonic() + max(300.0, rolled_bytes / 2e6)
    while len(copied) < segments:
        for t, text in tail.lines():
            if needle in text and text.startswith("[RemoteLogManager"):
                if COPIED in text:
                    copied.append(t)
                elif "Copying " in text:
                    copying.append(t)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{side}: {len(copied)} of {segments} segments copied in time:\n"
                f"{broker.log_tail(40)}"
            )
        if broker.process is None or broker.process.poll() is not None:
            raise RuntimeError(f"{side}: the broker died while tiering:\n{broker.log_tail(40)}")
        time.sleep(0.1)
    tier_s = max(copied) - t_switch
    tier_usage = used(u0, usage(broker))
    in_remote = remote_bytes(side, broker, topic, s3)

    # Every tiered segment's local copy deleted: only the roll record's segment is left.
    deadline = time.monotonic() + 300
    while not all(local_bases(broker, topic, p) == [rolls[p]] for p in range(args.partitions)):
        if time.monotonic() > deadline:
            local = {p: local_bases(broker, topic, p) for p in range(args.partitions)}
            raise RuntimeError(f"{side}: local copies not deleted in 300 s: {local}")
        time.sleep(0.5)

    messages = sum(o + 1 for o in rolls.values())
    reads = [catchup_once(broker, topic, messages) for _ in range(args.repeat)]
    best = max(reads, key=lambda r: r["fetch_mib_s"])
    return {
        "topic": topic,
        "records": records,
        "produce_s": round(produce_s, 1),
        "segments_tiered": segments,
        "rolled_bytes": rolled_bytes,
        "remote_bytes_all_objects": in_remote,
        "first_copy_started_after_s": round(min(copying) - t_switch, 2) if copying else None,
        "tier_s": round(tier_s, 2),
        "tier_mb_s": round(rolled_bytes / tier_s / 1e6, 1),
        "tier_cpu_and_calls": tier_usage,
        "catchup_runs": reads,
        "catchup_fetch_mib_s": best["fetch_mib_s"],
    }


def catchup_once(broker: ApacheKafkaBroker, topic: str, messages: int) -> dict[str, Any]:
    """ConsumerPerformance from offset 0 (a new group each run) to the end."""
    u0 = usage(broker)
    t0 = time.perf_counter()
    done = run_java(
        broker.libs, "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--messages", str(messages), "--timeout", "120000",
        timeout=1800, heap="512m",
    )  # fmt: skip
    wall = time.perf_counter() - t0
    cpu_and_calls = used(u0, usage(broker))
    if done.returncode != 0:
        raise RuntimeError(f"ConsumerPerformance failed:\n{done.stdout}{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    row = dict(zip(header, (v.strip() for v in lines[-1].split(",")), strict=True))
    got = int(row["data.consumed.in.nMsg"])
    if got < messages:
        raise RuntimeError(f"ConsumerPerformance read {got} of {messages}:\n{done.stdout}")
    return {
        "messages": got,
        "mib": float(row["data.consumed.in.MB"]),
        "fetch_mib_s": float(row["fetch.MB.sec"]),
        "fetch_s": round(float(row["fetch.time.ms"]) / 1000, 2),
        "rebalance_ms": int(row["rebalance.time.ms"]),
        "tool_wall_s": round(wall, 1),
        "cpu_and_calls": cpu_and_calls,
    }


def tiering_side(side: str, args: argparse.Namespace, work: Path, s3: str | None) -> dict:
    settings = dict(COMMON)
    if side != "kafka" and args.fetch_chunk_kib:
        settings["rsm.config.fetch.chunk.bytes"] = str(args.fetch_chunk_kib * 1024)
    broker = new_broker(side, work / side, settings, HEAP, s3)
    runs: list[dict[str, Any]] = []
    stopped: dict[str, Any] = {}
    try:
        broker.start()
        if side != "kafka":
            wait_for_serve(broker, count=2)
        for n in range(args.tier_repeat):
            runs.append(tier_once(side, broker, args, n, s3))
    finally:
        stopped = stop_broker(broker)
        if not args.keep:
            shutil.rmtree(work / side, ignore_errors=True)
    return {
        "runs": runs,
        "tier_mb_s": max(r["tier_mb_s"] for r in runs),
        "catchup_fetch_mib_s": max(r["catchup_fetch_mib_s"] for r in runs),
        "stop": stopped,
    }


def tier_evidence(side: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds of each process over the best tiering run, and its wall time."""
    run = max(side["runs"], key=lambda r: r["tier_mb_s"])
    used_cpu = {k: v for k, v in run["tier_cpu_and_calls"].items() if k.endswith("_cpu_s")}
    return {"tier_s": run["tier_s"], **used_cpu}


def catchup_evidence(side: dict[str, Any]) -> dict[str, Any]:
    """For the best catch-up read: ms per remote read (one per remote fetch Kafka serves:
    ours' rlmm.remote_log_segment_metadata calls), store bytes read per byte served and
    fetch_log_segment calls (chunks) per remote read, CPU seconds per process."""
    best: dict[str, Any] | None = None
    for run in side["runs"]:
        for c in run["catchup_runs"]:
            if best is None or c["fetch_mib_s"] > best["fetch_mib_s"]:
                best = c
    assert best is not None
    use = best["cpu_and_calls"]
    out: dict[str, Any] = {
        "fetch_s": best["fetch_s"],
        **{k: v for k, v in use.items() if k.endswith("_cpu_s")},
    }
    calls = use.get("rlmm_serve_calls") or {}
    reads = calls.get("rlmm.remote_log_segment_metadata")
    if reads:
        out["remote_reads"] = reads
        out["ms_per_remote_read"] = round(1000 * best["fetch_s"] / reads, 2)
        out["chunks_per_remote_read"] = round(calls.get("rsm.fetch_log_segment", 0) / reads, 2)
        out["store_bytes_read_per_byte_served"] = round(
            calls.get("fetch_bytes", 0) / (best["mib"] * MiB), 2
        )
    return out


def figures_tiering(args: argparse.Namespace, work: Path, stack: ExitStack) -> tuple[list, dict]:
    from tests.fixtures.s3 import moto_process

    sides: dict[str, dict] = {}
    for side in args.sides:
        s3 = None
        if side == "rlmm-s3":
            import boto3

            s3 = stack.enter_context(moto_process())
            client = boto3.client(
                "s3", endpoint_url=s3, region_name="us-east-1", aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )  # fmt: skip
            client.create_bucket(Bucket=S3_BUCKET)
            moto = pid_of(f"moto.server -H 127.0.0.1 -p {s3.rsplit(':', 1)[1]}")
            if moto is not None:
                OTHER_PIDS["moto_server"] = moto
        try:
            sides[side] = tiering_side(side, args, work, s3)
        finally:
            OTHER_PIDS.clear()
    base = sides.get("kafka", {})
    ours = sides.get("rlmm-local", {})
    extra = {
        name: sides[side]
        for side, name in (("rlmm-s3", "s3"), ("rlmm-local-nofsync", "local_nofsync"))
        if side in sides
    }
    setup = (
        f"{args.backlog_mib} MiB backlog, {args.partitions} partitions, {args.segment_mib} MiB"
        f" segments, {args.record_size} B records, uncompressed; best of {args.tier_repeat}"
    )
    rows = []
    if "tiering" in args.only:
        r = ratio(ours.get("tier_mb_s"), base.get("tier_mb_s"))
        rows.append({
            "figure": "tiering throughput (MB/s, 1e6 B)",
            "baseline": base.get("tier_mb_s"),
            "ours": ours.get("tier_mb_s"),
            **{f"ours_{k}": v.get("tier_mb_s") for k, v in extra.items()},
            "ratio": r,
            **{f"ratio_{k}": ratio(v.get("tier_mb_s"), base.get("tier_mb_s"))
               for k, v in extra.items()},
            "target": ">= 1.0x",
            "met": r is not None and r >= 1.0,
            "notes": (
                f"{setup}. Rolled bytes of the topic / seconds from the AlterConfigs that set"
                " remote.log.copy.disable=false to the broker log's last 'Copied ... to remote"
                " storage' line of the topic. Kafka copies a partition's segments one after"
                " another (one RLM task per partition), partitions in parallel."
                " local_nofsync: rlmm's local store with fsync = false."
            ),
            "evidence": {side: tier_evidence(v) for side, v in sides.items()},
        })  # fmt: skip
    if "catchup" in args.only:
        r = ratio(ours.get("catchup_fetch_mib_s"), base.get("catchup_fetch_mib_s"))
        rows.append({
            "figure": "consumer catching up from offset 0, all remote (MiB/s)",
            "baseline": base.get("catchup_fetch_mib_s"),
            "ours": ours.get("catchup_fetch_mib_s"),
            **{f"ours_{k}": v.get("catchup_fetch_mib_s") for k, v in extra.items()},
            "ratio": r,
            **{f"ratio_{k}": ratio(v.get("catchup_fetch_mib_s"), base.get("catchup_fetch_mib_s"))
               for k, v in extra.items()},
            "target": ">= 1.0x",
            "met": r is not None and r >= 1.0,
            "notes": (
                f"{setup}. Kafka's ConsumerPerformance (one consumer, default fetch sizes, a new"
                " group) after every tiered segment's local copy was deleted; its fetch.MB.sec"
                " (MiB of keys+values / time after the group join), best of"
                f" {args.repeat} reads per topic. The remote objects were just written, so"
                " they are in the page cache on both sides. Kafka serves a remote fetch by"
                " reading one partition's segment from the RSM's stream; ours' stream asks"
                " rlmm serve for one chunk (rsm.config.fetch.chunk.bytes, 1 MiB by default)"
                " at a time."
            ),
            "evidence": {side: catchup_evidence(v) for side, v in sides.items()},
        })  # fmt: skip
    return rows, sides


# -- figure 3: restart with many events in __remote_log_metadata -----------------------------


PROBE_EVERY_S = 0.05


def timed_start(
    broker: ApacheKafkaBroker, tps: list[TopicIdPartition], side: str, timeout: float
) -> dict[str, Any]:
    """Launch the broker and time, from the launch (seconds; log lines by their own
    timestamps): when it answers Metadata; when its RLMM is ready for every partition of
    the topic (Kafka's: its ConsumerTask's "Initialized for all the N assigned
    user-partitions" line; ours: ``rlmm.is_ready`` true for each, asked of rlmm serve
    over its socket every PROBE_EVERY_S); the RLM's first copy task of the topic (it has
    just called the RLMM's onPartitionLeadershipChanges); and when Kafka's RLM logged
    every partition ready (READY_LINE: a copy task's first run after isReady said true)."""
    topic, partitions = tps[0].topic, len(tps)
    tail = LogTail(broker.log_path, broker._log_size())
    ready = PartitionLines(topic, READY_LINE)
    tasks = PartitionLines(topic, TASK_LINE)
    kafka_init: list[tuple[float, int, int, int]] = []
    manager_started: list[float] = []
    leaders: dict[int, float] = {}
    led: dict[int, float] = {}  # as leader or follower
    leader_line = re.compile(
        rf"\] (Leader|Follower) {re.escape(topic)}-(\d+) (with topic id|starts at) "
    )
    serve_starting: list[float] = []
    serve_socket: str | None = None
    serve_hello: list[float] = []
    bridge_lost: list[tuple[float, str]] = []
    probe: ServeProbe | None = None
    rlmm_ready: float | None = None
    serving: float | None = None
    probe_error = None
    t0 = time.time()
    broker.launch()
    deadline = time.monotonic() + timeout
    checked = 0.0
    try:
        while True:
            for t, text in tail.lines():
                ready.feed(t, text)
                tasks.feed(t, text)
                if m := KAFKA_INIT.search(text):
                    kafka_init.append((t, int(m.group(1)), int(m.group(2)), int(m.group(3))))
                    if int(m.group(1)) >= partitions and rlmm_ready is None:
                        rlmm_ready = t
                elif SERVE_MANAGER in text:
                    manager_started.append(t)
                elif m := SERVE_AT.search(text):
                    serve_socket = m.group(2)
                    serve_hello.append(t)
                elif m := leader_line.search(text):
                    led.setdefault(int(m.group(2)), t)
                    if m.group(1) == "Leader":
                        leaders.setdefault(int(m.group(2)), t)
                elif text.startswith("starting rlmm serve"):
                    serve_starting.append(t)
                elif text.startswith("rlmm serve at ") and "reconnecting" in text:
                    # e.g. "went away: java.nio.channels.ClosedByInterruptException;
                    # reconnecting (rlmm)": isReady is false until it is back
                    bridge_lost.append((round(t - t0, 2), text[:160]))
            if side != "kafka" and rlmm_ready is None and serve_socket is not None:
                try:
                    if probe is None:
                        probe = ServeProbe(serve_socket, tps)
                    if probe.all_ready():
                        rlmm_ready = time.time()
                except OSError as e:  # the serve not listening yet, or restarted
                    probe_error = repr(e)
                    if probe is not None:
                        probe.close()
                        probe = None
            if serving is None:
                with contextlib.suppress(RuntimeError):
                    serving = wait_serving(broker, time.monotonic() + 0.2)
            if serving is not None and rlmm_ready is not None and len(ready.seen) >= partitions:
                break
            if time.monotonic() > checked + 1:
                broker.raise_if_failed()
                checked = time.monotonic()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{side}: serving {serving}, RLMM ready {rlmm_ready}, {len(ready.seen)} of"
                    f" {partitions} partitions seen ready by the RLM in {timeout} s"
                    f" (probe: {probe_error}):\n{broker.log_tail(40)}"
                )
            time.sleep(PROBE_EVERY_S)
    finally:
        if probe is not None:
            probe.close()
    assert broker.process is not None and serving is not None and rlmm_ready is not None
    jvm = proc_sample(broker.process.pid)
    pids = [p for p in serve_pids(broker) if alive(p)]
    serve = proc_sample(pids[-1]) if pids else None
    rlm_ready = max(ready.seen.values())
    first_task = min(tasks.seen.values())
    # Kafka's ReplicaManager makes the partitions followers or leaders (a restarted
    # broker may take them as followers first, then lead them once it is unfenced) and
    # hands them to its RLM, which passes them to the RLMM (onPartitionLeadershipChanges);
    # its tasks for a leader follow.
    assigned = max(led.values()) if len(led) >= partitions else first_task
    lead = max(leaders.values()) if len(leaders) >= partitions else first_task
    out: dict[str, Any] = {
        "serving_s": round(serving - t0, 2),
        "rlmm_ready_s": round(rlmm_ready - t0, 2),
        "rlmm_ready_after_serving_s": round(rlmm_ready - serving, 2),
        "partitions_assigned_s": round(assigned - t0, 2),
        "rlmm_ready_after_assigned_s": round(rlmm_ready - assigned, 2),
        "partitions_led_s": round(lead - t0, 2),
        "first_copy_task_s": round(first_task - t0, 2),
        "last_copy_task_s": round(max(tasks.seen.values()) - t0, 2),
        "serving_and_rlmm_ready_s": round(max(serving, rlmm_ready) - t0, 2),
        "rlm_first_partition_ready_s": round(min(ready.seen.values()) - t0, 2),
        "rlm_all_ready_s": round(max(rlm_ready, serving) - t0, 2),
        "rlm_all_ready_after_first_copy_task_s": round(rlm_ready - first_task, 2),
        "broker_jvm_cpu_s_at_rlm_ready": None if jvm is None else round(jvm[0], 1),
    }
    if kafka_init:
        t, n, meta, ms = kafka_init[-1]
        out["kafka_rlmm_initialized"] = {"at_s": round(t - t0, 2), "partitions": n,
                                         "meta_partitions": meta, "its_own_ms": ms}  # fmt: skip
    if manager_started:
        out["rlmm_manager_started_s"] = round(manager_started[-1] - t0, 2)
    if bridge_lost:
        out["bridge_connection_lost"] = bridge_lost
    if serve_starting and serve_hello:
        # the broker's start waits for this: its RSM's configure needs the serve
        out["rlmm_serve_started_s"] = round(serve_starting[0] - t0, 2)
        out["rlmm_serve_answered_hello_s"] = round(serve_hello[0] - t0, 2)
    if serve is not None:
        out["rlmm_serve_cpu_s_at_rlm_ready"] = round(serve[0], 2)
        out["rlmm_serve_rss_mib_at_rlm_ready"] = round(serve[1] / MiB, 1)
        out["rlmm_serve_calls_at_rlm_ready"] = serve_calls(broker)
    return out


def figure_restart(args: argparse.Namespace, work: Path) -> tuple[list, dict]:
    partitions = args.restart_partitions
    segments = max(1, args.events // (2 * partitions))
    head_segments = max(1, round(segments * (1 - args.tail)))
    root = work / "restart"
    broker = new_broker("kafka", root, dict(COMMON), HEAP)
    topic = f"restart-{uuid4().hex[:6]}"
    detail: dict[str, Any] = {
        "partitions": partitions,
        "segments_per_partition": segments,
        "events": 2 * segments * partitions,
        "tail_events": 2 * (segments - head_segments) * partitions,
        "metadata_partitions": METADATA_PARTITIONS,
        "events_per_batch": args.events_per_batch,
    }
    timeout = args.restart_timeout
    try:
        broker.start()
        asyncio.run(create_topic(broker.bootstrap, topic, partitions, SYNTHETIC_TOPIC))
        tid = topic_id(broker, topic)
        tps = [TopicIdPartition(tid, topic, p) for p in range(partitions)]
        detail["write_head"] = asyncio.run(
            write_events(broker.bootstrap, tps, range(head_segments), args.events_per_batch)
        )
        stop_broker(broker)
        # ours, first start: no snapshot yet, a full replay; its clean stop snapshots the head
        swap_side(broker, "rlmm-local", dict(COMMON))
        detail["ours_first_start_full_replay_of_head"] = timed_start(
            broker, tps, "rlmm-local", timeout
        )
        detail["ours_first_stop"] = stop_broker(broker)
        snapshots = sorted(
            str(p.relative_to(root)) for p in (root / "rlmm-data").rglob("*") if p.is_file()
        )
        detail["rlmm_data_files_after_head"] = snapshots[:20]
        shutil.copytree(root / "rlmm-data", root / "rlmm-data-head")
        # the tail, written while Kafka's RLMM runs (ours is not there to snapshot it)
        swap_side(broker, "kafka", dict(COMMON))
        broker.start()
        detail["write_tail"] = asyncio.run(
            write_events(
                broker.bootstrap, tps, range(head_segments, segments), args.events_per_batch
            )
        )
        stop_broker(broker)
        base_runs, ours_runs = [], []
        for _ in range(args.repeat):
            swap_side(broker, "kafka", dict(COMMON))
            base_runs.append(timed_start(broker, tps, "kafka", timeout))
            base_runs[-1]["stop"] = stop_broker(broker)
            shutil.rmtree(root / "rlmm-data")
            shutil.copytree(root / "rlmm-data-head", root / "rlmm-data")
            swap_side(broker, "rlmm-local", dict(COMMON))
            ours_runs.append(timed_start(broker, tps, "rlmm-local", timeout))
            ours_runs[-1]["stop"] = stop_broker(broker)
    finally:
        stop_broker(broker)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    detail["baseline_runs"] = base_runs
    detail["ours_runs"] = ours_runs

    def best(runs: list[dict], key: str) -> float:
        return min(r[key] for r in runs)

    first = detail["ours_first_start_full_replay_of_head"]
    b_all = best(base_runs, "serving_and_rlmm_ready_s")
    o_all = best(ours_runs, "serving_and_rlmm_ready_s")
    b_rlmm = best(base_runs, "rlmm_ready_after_serving_s")
    o_rlmm = best(ours_runs, "rlmm_ready_after_serving_s")
    b_rlm, o_rlm = best(base_runs, "rlm_all_ready_s"), best(ours_runs, "rlm_all_ready_s")
    floor = PROBE_EVERY_S  # a smaller reading says "within one probe"
    speedup = round(max(b_rlmm, floor) / max(o_rlmm, floor), 1)
    events = detail["events"]
    scale = (
        "" if events >= 1_000_000 else
        f" Measured at {events:,} events, not 1,000,000 (see params): the baseline's replay"
        " grows with the events, ours' with the tail (the --tail fraction)."
    )  # fmt: skip
    setup = (
        f"{partitions} partitions x {detail['segments_per_partition']} synthetic segments ="
        f" {events:,} events in {METADATA_PARTITIONS} metadata partitions"
        f" ({detail['tail_events']:,} after the snapshot ours' previous clean stop left);"
        f" best of {args.repeat} restarts per side on the same data." + scale
    )
    rows = [
        {
            "figure": "restart: launch to serving with the RLMM ready for every partition (s)",
            "baseline": b_all,
            "ours": o_all,
            "ratio": round(b_all / o_all, 1),
            "target": None,
            "met": None,
            "notes": (
                f"{setup} From the JVM's launch until the broker answers Metadata and its RLMM"
                " is ready for every partition: Kafka's TopicBasedRLMM by its own 'Initialized"
                " for all the N assigned user-partitions' line; ours by rlmm.is_ready asked of"
                f" rlmm serve over its socket every {PROBE_EVERY_S} s (what the bridge's isReady"
                " asks). Includes the JVM's start and log loading (the same for both) and, for"
                " ours, starting rlmm serve, which the broker's start waits on."
            ),
        },
        {
            "figure": "restart: RLMM catch-up after the broker serves (s)",
            "baseline": b_rlmm,
            "ours": o_rlmm,
            "ratio": speedup,
            "target": ">= 20x",
            "met": speedup >= 20,
            "notes": (
                "The same readiness, from the moment the broker answers Metadata: both RLMMs"
                " read __remote_log_metadata from this broker, so neither can catch up before"
                " its listener is open, and the broker gives them the partitions about then"
                " (details: partitions_assigned_s, from its state-change lines). The"
                " baseline's replay of the topic vs ours' snapshot restore + tail, with what"
                " of its start rlmm's manager had not done by then (details:"
                " rlmm_manager_started_s, its 'remote log metadata manager started' line)."
                " Details also give it from the assignment (rlmm_ready_after_assigned_s)."
                f" Readings below the probe's {PROBE_EVERY_S} s count as that in the ratio."
            ),
        },
        {
            "figure": "restart without a snapshot (ours' first start): RLMM catch-up after"
            " the broker serves (s)",
            "baseline": b_rlmm,
            "ours": first["rlmm_ready_after_serving_s"],
            "ratio": round(max(b_rlmm, floor) / max(first["rlmm_ready_after_serving_s"], floor), 2),
            "target": None,
            "met": None,
            "notes": (
                "As the row above, but ours has no snapshot yet: its first start replays the"
                f" head ({detail['write_head']['events']:,} events, the baseline's runs replay"
                " the head and the tail). rlmm's manager replays in Python (aiokafka), Kafka's"
                " in Java."
            ),
        },
        {
            "figure": "restart: launch to Kafka's RLM running every partition's tiering task (s)",
            "baseline": b_rlm,
            "ours": o_rlm,
            "ratio": round(b_rlm / o_rlm, 1),
            "target": None,
            "met": None,
            "notes": (
                "From the launch to the last partition's first '" + READY_LINE + " ... after"
                " becoming leader': a copy task logs it on its first run after the RLMM's"
                " isReady said true; tasks run every remote.log.manager.task.interval.ms ="
                " 500 ms (the suite's setting, both sides), which bounds the resolution. After"
                " a partition is ready its expiration task lists all its remote segments every"
                " run (listRemoteLogSegments): through the bridge, calls to rlmm serve (see"
                " details' rlmm_serve_calls_at_rlm_ready); and a bridge connection that broke"
                " (details' bridge_connection_lost) answers isReady false until it is back."
            ),
        },
    ]
    return rows, detail


# -- figure 4: rlmm serve idle at many tiered partitions ------------------------------------


def wait_all_ready(
    broker: ApacheKafkaBroker, tail: LogTail, topic: str, n: int, timeout: float
) -> float:
    ready = PartitionLines(topic, READY_LINE)
    deadline = time.monotonic() + timeout
    while len(ready.seen) < n:
        for t, text in tail.lines():
            ready.feed(t, text)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(ready.seen)} of {n} ready in {timeout} s:\n{broker.log_tail(30)}"
            )
        time.sleep(0.2)
    return max(ready.seen.values())


def idle_side(side: str, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    root = work / f"idle-{side}"
    out = []
    broker = None
    topic = f"idle-{uuid4().hex[:6]}"
    try:
        for i, interval in enumerate(args.idle_task_interval_ms):
            settings = {**COMMON, "remote.log.manager.task.interval.ms": str(interval)}
            tail = None
            if broker is None:
                broker = new_broker(side, root, settings, HEAP)
                broker.start()
                t0 = time.perf_counter()
                tail = LogTail(broker.log_path, 0)
                asyncio.run(
                    create_topic(broker.bootstrap, topic, args.idle_partitions, SYNTHETIC_TOPIC)
                )
                create_s = time.perf_counter() - t0
                tid = topic_id(broker, topic)
                tps = [TopicIdPartition(tid, topic, p) for p in range(args.idle_partitions)]
                segments = range(args.idle_segments)
                written = asyncio.run(
                    write_events(broker.bootstrap, tps, segments, args.events_per_batch)
                )
            else:
                swap_side(broker, side, settings)
                tail = LogTail(broker.log_path, broker._log_size())
                broker.start()
            wait_all_ready(broker, tail, topic, args.idle_partitions, args.restart_timeout)
            time.sleep(args.idle_settle)
            assert broker.process is not None
            pids = {"broker_jvm": broker.process.pid}
            serving = [p for p in serve_pids(broker) if alive(p)]
            if side != "kafka":
                if not serving:
                    raise RuntimeError(f"no rlmm serve alive:\n{broker.log_tail(30)}")
                pids["rlmm_serve"] = serving[-1]
            calls0 = serve_calls(broker) if side != "kafka" else None
            # at least two rounds of the RLM's tasks (they run in bursts, every interval)
            window = sample_window(pids, max(args.idle_seconds, 2 * interval / 1000))
            if calls0 is not None:
                calls1 = serve_calls(broker) or {}
                window["rlmm_serve_calls_per_s"] = {
                    k: round((v - calls0.get(k, 0)) / window["window_s"], 1)
                    for k, v in sorted(calls1.items())
                    if v != calls0.get(k, 0)
                }
            out.append({
                "task_interval_ms": interval,
                "partitions": args.idle_partitions,
                "segments": args.idle_partitions * args.idle_segments,
                **({"topic_create_s": round(create_s, 1), "events": written} if i == 0 else {}),
                **window,
            })  # fmt: skip
            stop_broker(broker)
    finally:
        if broker is not None:
            stop_broker(broker)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return out


def figure_idle(args: argparse.Namespace, work: Path) -> tuple[list, dict]:
    base = idle_side("kafka", args, work)
    ours = idle_side("rlmm-local", args, work)
    rows = []
    for b, o in zip(base, ours, strict=True):
        serve = o["rlmm_serve"]
        jb, jo = b["broker_jvm"], o["broker_jvm"]
        interval = o["task_interval_ms"]
        common = (
            f"{o['partitions']} remote-enabled partitions ({o['segments']:,} synthetic tiered"
            " segments), nothing produced, remote.log.manager.task.interval.ms="
            f"{o['task_interval_ms']}"
            f", {o['window_s']} s window after every partition was ready and"
            f" {args.idle_settle} s more. Baseline: the broker JVM with Kafka's plugins (there"
            " is no Python process there); ours' broker JVM:"
            f" {jo.get('cpu_pct_of_core')}% CPU, {jo.get('rss_mib_max')} MiB RSS (baseline JVM"
            f" {jb.get('cpu_pct_of_core')}%, {jb.get('rss_mib_max')} MiB). rlmm serve's calls"
            f" per second over the window: {o.get('rlmm_serve_calls_per_s')}."
        )
        rows.append({
            "figure": f"idle rlmm serve RSS (MiB, max), task interval {o['task_interval_ms']} ms",
            "baseline": jb.get("rss_mib_max"),
            "ours": serve.get("rss_mib_max"),
            "ratio": None,
            "target": "<= 300 MiB",
            "met": serve.get("rss_mib_max") is not None and serve["rss_mib_max"] <= 300,
            "notes": common,
        })  # fmt: skip
        rows.append({
            "figure": f"idle rlmm serve CPU (% of a core), task interval {interval} ms",
            "baseline": jb.get("cpu_pct_of_core"),
            "ours": serve.get("cpu_pct_of_core"),
            "ratio": None,
            "target": "<= 1%",
            "met": serve.get("cpu_pct_of_core") is not None and serve["cpu_pct_of_core"] <= 1.0,
            "notes": common + (
                " Every RLM task run (a copy and an expiration task per partition, every"
                " interval) asks the RLMM isReady, and every expiration run lists the"
                " partition's remote segments (listRemoteLogSegments): through the bridge each"
                " is a call to rlmm serve, so its CPU grows with partitions / interval."
            ),
        })  # fmt: skip
    return rows, {"baseline": base, "ours": ours}


# -- main ----------------------------------------------------------------------------------

QUICK = {
    "backlog_mib": 64,
    "segment_mib": 8,
    "partitions": 2,
    "events": 20_000,
    "restart_partitions": 50,
    "idle_partitions": 200,
    "idle_seconds": 15.0,
    "idle_settle": 3.0,
    "idle_task_interval_ms": "500",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every figure scaled down")
    parser.add_argument("--only", default="tiering,catchup,restart,idle")
    parser.add_argument(
        "--repeat", type=int, default=1, help="catch-up reads and restarts per side"
    )
    parser.add_argument("--tier-repeat", type=int, default=1, help="backlogs tiered per side")
    parser.add_argument("--sides", default="kafka,rlmm-local,rlmm-s3", help="for tiering/catchup")
    parser.add_argument("--backlog-mib", type=int, default=1024)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=4, help="of the backlog topic")
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument(
        "--fetch-chunk-kib", type=int, default=0,
        help="ours: rsm.config.fetch.chunk.bytes (0: the bridge's default)",
    )  # fmt: skip
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--restart-partitions", type=int, default=1000)
    parser.add_argument("--tail", type=float, default=0.01, help="events after ours' snapshot")
    parser.add_argument("--events-per-batch", type=int, default=500)
    parser.add_argument("--restart-timeout", type=float, default=900.0)
    parser.add_argument("--idle-partitions", type=int, default=4000)
    parser.add_argument("--idle-segments", type=int, default=4, help="synthetic, per partition")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--idle-settle", type=float, default=10.0)
    parser.add_argument("--idle-task-interval-ms", default="30000,500",
                        help="Kafka's default (30 s), then the test suite's (500 ms)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the brokers' dirs")
    args = parser.parse_args()
    if args.quick:
        for k, v in QUICK.items():
            if parser.get_default(k) == getattr(args, k):
                setattr(args, k, v)
    args.only = set(args.only.split(","))
    args.sides = args.sides.split(",")
    args.idle_task_interval_ms = [int(v) for v in str(args.idle_task_interval_ms).split(",")]
    unknown = args.only - {"tiering", "catchup", "restart", "idle"}
    if unknown:
        parser.error(f"unknown figures {sorted(unknown)}")

    out: dict[str, Any] = {
        "benchmark": "plugin",
        "machine": machine(),
        "kafka": KAFKA_VERSION,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "params": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
    }
    jar = build_plugin_jar()
    out["plugin_jar"] = str(jar.relative_to(Path(__file__).resolve().parents[1]))
    rows: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="rlmm-bench-plugin-"))
    t0 = time.perf_counter()
    loads: list[list[float]] = []
    done = threading.Event()

    def sample_load() -> None:  # the 1-minute load average every 30 s: was the machine shared?
        while not done.wait(30):
            loads.append([round(time.perf_counter() - t0), round(os.getloadavg()[0], 2)])

    threading.Thread(target=sample_load, daemon=True).start()
    try:
        with ExitStack() as stack:
            if args.only & {"tiering", "catchup"}:
                r, d = figures_tiering(args, work, stack)
                rows += r
                details["tiering_catchup"] = d
            if "restart" in args.only:
                r, d = figure_restart(args, work)
                rows += r
                details["restart"] = d
            if "idle" in args.only:
                r, d = figure_idle(args, work)
                rows += r
                details["idle"] = d
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    done.set()
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out["load_average_1min_every_30s"] = loads
    out["bench_s"] = round(time.perf_counter() - t0)
    out["ratio_convention"] = (
        "ratio > 1 means ours is better: ours/baseline for rates, baseline/ours for times"
    )
    out["results"] = rows
    out["details"] = details
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
