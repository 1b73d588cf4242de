"""Benchmark: acknowledged segment lifecycles/s through the manager on KafkaEventLog.

A lifecycle is add COPY_SEGMENT_STARTED + update COPY_SEGMENT_FINISHED, each awaited:
a write returns once the manager's own apply loop has consumed it back from the
broker and applied it (read-your-writes), so its latency is produce + fetch + apply.
Measured with 1 and 64 concurrent writers (target: 64 >= 10x one writer), each for
each consumer ``fetch_max_wait_ms``: Tansu answers a long-polling fetch only when
that wait expires, not when a record arrives (real Kafka answers at once), so on
Tansu it sets the floor of a write's latency.

Same-run baseline: KafkaEventLog appends alone (produce acks=all, no apply loop)
with the same writer counts; ``apply_overhead`` = appends/s / writes/s.

Brokers (``--brokers``): Tansu on memory storage, and Apache Kafka (the test suite's
pinned release, fetched with Maven; one KRaft node, tiered storage off so that
``__remote_log_metadata`` is free for Kafka's own RLMM). On Apache Kafka the same
workload also runs through Kafka's own TopicBasedRemoteLogMetadataManager, driven by
bench/java/KafkaRlmmBench.java (compiled with javac against the fetched jars):
``ours_vs_kafka_rlmm_<W>_writers`` = our lifecycles/s / Kafka's (target >= 2 at 64).
Each broker runs on free loopback ports and is stopped at the end, also on error;
``--bootstrap`` measures an external Kafka instead (no Kafka RLMM run). Prints ONE
JSON document. Usage:
  python bench/kafka_writes.py [--seconds 4] [--writers 1,64] [--fetch-max-wait 200,10]
                               [--brokers tansu,apache] [--apache-fetch-max-wait 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.codec import encode
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tests.fixtures.apache_kafka import KAFKA_VERSION, ApacheKafkaBroker, classpath
from tests.fixtures.kafka import TansuBroker

PARTITIONS = 50  # Kafka's default remote.log.metadata.topic.num.partitions
WARMUP_S = 0.5


def new_log(bootstrap: str, fetch_max_wait_ms: int) -> KafkaEventLog:
    return KafkaEventLog(
        bootstrap,
        PARTITIONS,
        KafkaLogSettings(
            topic=f"bench-rlmm-{uuid.uuid4().hex[:8]}",
            replication_factor=1,
            consumer_config={"fetch_max_wait_ms": fetch_max_wait_ms},
        ),
    )


def started(tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), offset, offset + 999, 0, 1, 0, 1 << 30, {0: offset}
    )


def finished(m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
    )


def percentile_ms(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return round(sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))] * 1e3, 2)


async def bench_manager(
    bootstrap: str, writers: int, seconds: float, fetch_max_wait_ms: int
) -> dict[str, Any]:
    manager = TopicBasedRemoteLogMetadataManager(
        new_log(bootstrap, fetch_max_wait_ms), close_event_log=True
    )
    async with manager:
        tps = [TopicIdPartition(uuid.uuid4(), "bench", i) for i in range(max(writers, 8))]
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 60)
        write_latencies: list[float] = []
        lifecycle_latencies: list[float] = []
        done = 0
        measure_from = time.perf_counter() + WARMUP_S
        deadline = measure_from + seconds

        async def writer(i: int) -> None:
            nonlocal done
            tp = tps[i % len(tps)]
            offset = i * 10**12
            while (now := time.perf_counter()) < deadline:
                m = started(tp, offset)
                offset += 1000
                t0 = now
                await manager.add_remote_log_segment_metadata(m)
                t1 = time.perf_counter()
                await manager.update_remote_log_segment_metadata(finished(m))
                t2 = time.perf_counter()
                if t0 >= measure_from and t2 <= deadline:
                    write_latencies.extend((t1 - t0, t2 - t1))
                    lifecycle_latencies.append(t2 - t0)
                    done += 1

        await asyncio.gather(*(writer(i) for i in range(writers)))
        stats = manager.stats
        assert stats.skipped_invalid == stats.skipped_undecodable == 0, stats
    write_latencies.sort()
    lifecycle_latencies.sort()
    return {
        "writers": writers,
        "fetch_max_wait_ms": fetch_max_wait_ms,
        "lifecycles": done,
        "lifecycles_per_s": round(done / seconds, 1),
        "write_to_applied_ms_p50": percentile_ms(write_latencies, 0.50),
        "write_to_applied_ms_p99": percentile_ms(write_latencies, 0.99),
        "lifecycle_ms_p50": percentile_ms(lifecycle_latencies, 0.50),
        "lifecycle_ms_p99": percentile_ms(lifecycle_latencies, 0.99),
    }


async def bench_appends(bootstrap: str, writers: int, seconds: float) -> dict[str, Any]:
    """Baseline: the same encoded events appended with acks=all, no apply loop."""
    value = encode(started(TopicIdPartition(uuid.uuid4(), "bench", 0), 0))
    latencies: list[float] = []
    done = 0
    async with new_log(bootstrap, 200) as log:
        measure_from = time.perf_counter() + WARMUP_S
        deadline = measure_from + seconds

        async def writer(i: int) -> None:
            nonlocal done
            while (t0 := time.perf_counter()) < deadline:
                await log.append(i % PARTITIONS, value)
                t1 = time.perf_counter()
                if t0 >= measure_from and t1 <= deadline:
                    latencies.append(t1 - t0)
                    done += 1

        await asyncio.gather(*(writer(i) for i in range(writers)))
    latencies.sort()
    return {
        "writers": writers,
        "appends_per_s": round(done / seconds, 1),
        "append_ms_p50": percentile_ms(latencies, 0.50),
        "append_ms_p99": percentile_ms(latencies, 0.99),
    }


async def run(args: argparse.Namespace, bootstrap: str, waits: list[int]) -> dict[str, Any]:
    writer_counts = [int(w) for w in args.writers.split(",")]
    low, high = min(writer_counts), max(writer_counts)
    baseline = {w: await bench_appends(bootstrap, w, args.baseline_seconds) for w in writer_counts}
    by_wait: dict[str, Any] = {}
    for wait in waits:
        runs = {w: await bench_manager(bootstrap, w, args.seconds, wait) for w in writer_counts}
        by_wait[f"fetch_max_wait_ms={wait}"] = {
            "runs": list(runs.values()),
            f"ratio_{high}_vs_{low}_writers": round(
                runs[high]["lifecycles_per_s"] / max(runs[low]["lifecycles_per_s"], 1e-9), 1
            ),
            # events/s the log alone takes vs events/s acknowledged through the manager
            f"apply_overhead_{high}_writers": round(
                baseline[high]["appends_per_s"] / max(2 * runs[high]["lifecycles_per_s"], 1e-9),
                2,
            ),
        }
    return {"baseline_appends": list(baseline.values()), "manager": by_wait}


_QUIET_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def kafka_rlmm_runs(
    broker: ApacheKafkaBroker, writer_counts: list[int], seconds: float, work: Path
) -> list[dict[str, Any]]:
    """The same lifecycles through Kafka's own RLMM (Java API), one JVM per writer count."""
    source = Path(__file__).resolve().parent / "java" / "KafkaRlmmBench.java"
    classes = work / "classes"
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac not on PATH: cannot build bench/java/KafkaRlmmBench.java")
    subprocess.run(
        [javac, "-d", str(classes), "-cp", classpath(broker.libs), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (work / "log4j2.properties").write_text(_QUIET_LOG4J2)
    out = []
    for writers in writer_counts:
        log_dir = work / f"rlmm-{writers}"
        log_dir.mkdir()
        done = subprocess.run(
            [
                broker.java, "-Xmx512m",
                f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
                "-cp", f"{classpath(broker.libs)}:{classes}",
                "KafkaRlmmBench", broker.bootstrap, str(writers), str(seconds), str(WARMUP_S),
                str(PARTITIONS), str(log_dir),
            ],
            capture_output=True, text=True, timeout=300 + seconds, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"KafkaRlmmBench failed ({done.returncode}):\n{done.stderr[-3000:]}")
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


async def run_apache(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    # Tiered storage off: the broker's own RLMM would hold __remote_log_metadata.
    broker = ApacheKafkaBroker(
        root / "broker", overrides={"remote.log.storage.system.enable": "false"}
    )
    try:
        await asyncio.to_thread(broker.start)
        waits = [int(w) for w in args.apache_fetch_max_wait.split(",")]
        ours = await run(args, broker.bootstrap, waits)
        writer_counts = [int(w) for w in args.writers.split(",")]
        kafka = await asyncio.to_thread(
            kafka_rlmm_runs, broker, writer_counts, args.seconds, root / "java"
        )
    finally:
        await asyncio.to_thread(broker.stop)
    ours_runs = ours["manager"][f"fetch_max_wait_ms={waits[0]}"]["runs"]
    ratios = {
        f"ours_vs_kafka_rlmm_{k['writers']}_writers": round(
            o["lifecycles_per_s"] / max(k["lifecycles_per_s"], 1e-9), 2
        )
        for o, k in zip(ours_runs, kafka, strict=True)
    }
    return {
        "broker": f"Apache Kafka {KAFKA_VERSION}, one KRaft node",
        **ours,
        "kafka_rlmm": {
            "what": "Kafka's TopicBasedRemoteLogMetadataManager via its Java API, same workload",
            "runs": kafka,
        },
        **ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per manager run")
    parser.add_argument("--baseline-seconds", type=float, default=2.0)
    parser.add_argument("--writers", default="1,64")
    parser.add_argument(
        "--fetch-max-wait", default="200,10", help="consumer fetch_max_wait_ms on Tansu"
    )
    parser.add_argument(
        "--apache-fetch-max-wait",
        default="500",
        help="consumer fetch_max_wait_ms on Apache Kafka (it answers when data arrives)",
    )
    parser.add_argument("--brokers", default="tansu,apache", help="tansu and/or apache")
    parser.add_argument("--bootstrap", default=None, help="external Kafka (instead of --brokers)")
    args = parser.parse_args()
    brokers = set(args.brokers.split(","))
    results: dict[str, Any] = {}
    if args.bootstrap:
        waits = [int(w) for w in args.fetch_max_wait.split(",")]
        results = {"broker": "external", **asyncio.run(run(args, args.bootstrap, waits))}
    if "tansu" in brokers and not args.bootstrap:
        tansu = TansuBroker("memory://tansu/")
        try:
            tansu.start()
            waits = [int(w) for w in args.fetch_max_wait.split(",")]
            results = {
                "broker": "tansu memory://",
                **asyncio.run(run(args, tansu.bootstrap, waits)),
            }
        finally:
            tansu.stop()
            tansu.log_path.unlink(missing_ok=True)
    if "apache" in brokers and not args.bootstrap:
        root = Path(tempfile.mkdtemp(prefix="bench-kafka-writes-"))
        try:
            results["apache_kafka"] = asyncio.run(run_apache(args, root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "benchmark": "kafka_writes",
                "event_log": f"KafkaEventLog, {PARTITIONS} partitions, acks=all",
                "machine": machine(),
                "params": vars(args),
                **results,
                "targets": {
                    "ratio_64_vs_1_writers": 10,
                    "apache_kafka.ours_vs_kafka_rlmm_64_writers": 2,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
