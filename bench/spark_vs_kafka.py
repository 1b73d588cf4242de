"""Benchmark: Spark's own Kafka source on a live broker vs ``kafka-archive`` on rlmm's archive.

An Apache Kafka 4.1.1 broker (the suite's pinned release, one KRaft node) gets a
``--partitions`` topic of ``--records`` records of ``--record-size`` bytes whose
CreateTime timestamps are spread evenly over ``--hours`` hours (ending 6 hours ago),
written by a small Java producer (kafka-clients, run from source by ``java``) with
explicit timestamps. Segments roll at ``--segment-mb``, so each covers a stretch of
time; one record per partition stamped "now" (more than ``segment.ms`` = 6 h after
the last segment's first record) rolls the last one, so every record written is in a
rolled segment. ``rlmm offload --once`` (the sidecar, over the broker's log dir;
``retention.ms=-1`` on the topic and in the sidecar's config, so nothing is past
retention) copies them into rlmm's local remote storage.

Then, in one Spark session (``local[2]``), over the same offsets ([earliest, the roll
record) per partition, explicit ``endingOffsets`` on both sides, ``minPartitions=2``):

- full scan, ``count(*)`` and ``sum(length(value))``: (a) Spark's ``format("kafka")``
  reading the broker vs (b) ``format("kafka-archive")``. Target: (b) >= 3x (a).
- a ``--window-hours`` window, ``where timestamp >= t1 and timestamp < t2``, at each
  start hour of ``--window-at`` (default: the first, the middle and the last hour):
  (a) Spark's Kafka source reads the whole range and filters; (b) kafka-archive gets
  the window pushed down (segments ending before t1 are pruned, the first one left
  starts at its time-index entry; a window's end prunes nothing, so an early window
  still reads, and drops, everything after it). Target on the middle hour: >= 20x.
  Extra baseline (no target): (c) Spark's Kafka source given the window through its
  own ``startingTimestamp`` / ``endingTimestamp`` options (plus the same ``where``),
  the manual way a Kafka-source user narrows the read.

  And (d) kafka-archive given the window through its own ``startingTimestamp`` /
  ``endingTimestamp`` (plus the same ``where``): it must match or beat (c).

``--cluster`` runs it the way a backfill runs: a Spark standalone cluster (a master
and two 1-core workers, each its own JVM and work dir, from pyspark's own launcher)
with the driver in client mode, the archive in S3 (moto's server on loopback; the
sidecar copies there), executors given only the remote settings the read carries and
credentials through ``spark.executorEnv`` (no shared disk, no config file).

Each query runs once to warm up (JIT, Python workers), then ``--repeat`` rounds with
the sides of a query interleaved; the best wall time counts. Counts and sums must be
equal across the sides of a query, or the bench fails (exit 1). Also reported: Spark's
fixed cost per query (1,000 records on 2 input partitions) and per input partition
(the same records on 40), kafka-archive's plan (slices, records, bytes it reads), the
planned input partitions, and the CPU seconds of the broker, Spark's JVM and its
Python workers during each best run. Prints ONE JSON document. Usage:
  python bench/spark_vs_kafka.py [--records 3000000] [--record-size 100]
      [--partitions 2] [--repeat 3] [--hours 24] [--window-hours 1] [--window-at 0,12,23]
      [--segment-mb 16] [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from bench._spark import SPARK_CORES, start_spark
from bench._topic import create_topic, roll
from rlmm.offload.logdir import read_offset_checkpoint
from tests.fixtures.apache_kafka import (
    KAFKA_VERSION,
    SPARK_KAFKA_VERSION,
    ApacheKafkaBroker,
    classpath,
    require_tools,
    spark_kafka_jars,
)
from tests.fixtures.s3 import moto_process
from tests.fixtures.spark_cluster import standalone_cluster

HOUR_MS = 3_600_000
# segment.ms: segments roll by size (--segment-mb); the records end this long before
# "now", so the roll record stamped "now" rolls the last segment by time.
ROLL_MS = 6 * HOUR_MS
FIXED_RECORDS = 500  # per partition: the tiny query that measures Spark's fixed cost
MANY_PARTITIONS = 40  # the same tiny query cut into this many input partitions
FIXED_RUNS = 5  # best of
TARGETS = {"full_scan": 3.0, "window": 20.0}
S3_BUCKET = "rlmm"
# What executors on the cluster get: credentials through their environment, as an
# instance profile would give them (moto accepts any), nothing else.
EXECUTOR_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}

# Records with explicit CreateTime timestamps, spread evenly over [t0, t1): Kafka's
# ProducerPerformance cannot set them. Run from source (java Source.java).
JAVA_PRODUCER = r"""
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TimedProducer {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        int partitions = Integer.parseInt(a[2]);
        long records = Long.parseLong(a[3]);
        int size = Integer.parseInt(a[4]);
        long t0 = Long.parseLong(a[5]), t1 = Long.parseLong(a[6]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("linger.ms", "20");
        p.put("batch.size", "262144");
        p.put("buffer.memory", "134217728");
        p.put("compression.type", "none");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        byte[] value = new byte[size];
        Random random = new Random(20);
        for (int i = 0; i < size; i++) value[i] = (byte) ('A' + random.nextInt(26));
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> first = new AtomicReference<>();
        long span = t1 - t0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (long i = 0; i < records; i++) {
                long ts = t0 + span * i / records;
                producer.send(
                    new ProducerRecord<>(topic, (int) (i % partitions), ts, null, value),
                    (meta, e) -> {
                        if (e != null) {
                            failed.incrementAndGet();
                            first.compareAndSet(null, e);
                        }
                    });
            }
            producer.flush();
        }
        if (failed.get() > 0) {
            System.err.println(failed.get() + " records failed: " + first.get());
            System.exit(1);
        }
        System.out.println(records);
    }
}
"""


# -- the topic, the archive ---------------------------------------------------


def topic_configs(segment_mb: int) -> dict[str, str]:
    return {
        "segment.bytes": str(segment_mb << 20),
        "segment.ms": str(ROLL_MS),
        "retention.ms": "-1",  # the old timestamps are never deleted
        "message.timestamp.before.max.ms": str(2**63 - 1),
    }


def produce(
    broker: ApacheKafkaBroker, root: Path, topic: str, args: argparse.Namespace, t0: int, t1: int
) -> None:
    java, _mvn = require_tools()
    source = root / "TimedProducer.java"
    source.write_text(JAVA_PRODUCER)
    argv = [
        java, "-Xmx512m", "-cp", classpath(broker.libs), str(source), broker.bootstrap, topic,
        str(args.partitions), str(args.records), str(args.record_size), str(t0), str(t1),
    ]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"the timed producer failed:\n{done.stdout}{done.stderr[-4000:]}")


def wait_rolled(broker: ApacheKafkaBroker, topic: str, rolls: dict[int, int]) -> int:
    """Until each partition's active segment starts at its roll record and the high
    watermark checkpoint (the sidecar copies nothing past it) covers that record;
    returns the number of rolled segments."""
    deadline = time.monotonic() + 120
    checkpoint = broker.data_dir / "replication-offset-checkpoint"
    while True:
        bases = {
            p: sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))
            for p in rolls
        }
        marks = read_offset_checkpoint(checkpoint) if checkpoint.exists() else {}
        if all(b[-1] == rolls[p] for p, b in bases.items()) and all(
            marks.get((topic, p), -1) > end for p, end in rolls.items()
        ):
            return sum(len(b) - 1 for b in bases.values())
        if time.monotonic() > deadline:
            raise RuntimeError(f"not rolled within 120 s: segments {bases}, marks {marks}")
        time.sleep(0.5)


def offload(
    broker: ApacheKafkaBroker, root: Path, topic: str, s3_endpoint: str | None = None
) -> tuple[Path, dict[str, Any]]:
    """``rlmm offload --once`` over the broker's log dir (this topic only), into the
    local remote dir, or the ``rlmm`` bucket at ``s3_endpoint``; its summary."""
    config = root / "rlmm.toml"
    remote = (
        ""
        if s3_endpoint is None
        else f'[remote]\ntype = "s3"\nbucket = "{S3_BUCKET}"\nendpoint_url = "{s3_endpoint}"\n'
        'region = "us-east-1"\n'
    )
    config.write_text(
        f'data_dir = "{root / "rlmm"}"\n'
        "[eventlog]\npartitions = 4\n" + remote + '[offload]\n"remote.storage.enable" = false\n'
        f'[offload.topics."{topic}"]\n"remote.storage.enable" = true\n"retention.ms" = -1\n'
    )
    rlmm_bin = Path(sys.executable).parent / "rlmm"
    child = subprocess.Popen(
        [str(rlmm_bin), "offload", "--once", "--json", "--config", str(config),
         "--log-dir", str(broker.data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = child.communicate(timeout=900)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"rlmm offload failed ({child.returncode}):\n{err.decode()[-4000:]}")
    summary: dict[str, Any] = json.loads(out)
    return config, summary


# -- Spark --------------------------------------------------------------------


def cpu_snapshot(broker_pid: int) -> dict[int, tuple[str, float]]:
    """Per process: its kind (the broker JVM, Spark's JVM, Spark's Python workers,
    moto's S3 server, this driver process) and its CPU seconds so far."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    out = {me.pid: ("driver", t.user + t.system)}
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            name = child.name()
        except psutil.Error:
            continue
        if child.pid == broker_pid:
            kind = "broker"
        elif name == "java":
            kind = "spark_jvm"
        elif name.startswith("python") and _is_s3_server(child):
            kind = "s3_server"  # moto's server is a Python process too, serving the reads
        elif name.startswith("python"):
            kind = "python_workers"
        else:
            continue
        out[child.pid] = (kind, c.user + c.system)
    return out


def _is_s3_server(process: Any) -> bool:
    import psutil

    try:
        return "moto.server" in process.cmdline()
    except psutil.Error:
        return False


def cpu_spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> Any:
    """CPU seconds per kind between two snapshots (a process gone by ``after`` is not
    counted for that stretch: Spark reuses its Python workers, so that is rare)."""
    total = {k: 0.0 for k in ("broker", "spark_jvm", "python_workers", "s3_server", "driver")}
    started = 0  # Python workers that started during the run: each paid its imports
    for pid, (kind, seconds) in after.items():
        total[kind] += seconds - before.get(pid, (kind, 0.0))[1]
        started += kind == "python_workers" and pid not in before
    return {**{k: round(v, 2) for k, v in total.items()}, "python_workers_started": started}


def aggregate(df: Any) -> tuple[int, int]:
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    return int(row["n"]), int(row["b"] or 0)


def timed(
    runs: dict[str, Callable[[], tuple[int, int]]], repeat: int, broker_pid: int
) -> dict[str, dict[str, Any]]:
    """Each run once to warm up, then ``repeat`` rounds of all of them interleaved (so
    load from elsewhere on the machine hits every side alike), in reverse order: per
    run, the best wall time and the CPU seconds spent during that run."""
    out: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        t0 = time.perf_counter()
        first = run()
        out[name] = {"rows": first[0], "value_bytes": first[1], "first_s": time.perf_counter() - t0}
    # Measured in the reverse order of the warm-ups, so the run warmed up last is
    # measured first, and each run is measured right after a warm-up or a run of the
    # other side: Spark stops a Python worker idle for 60 s, and a Kafka-source scan
    # of 30M records takes longer, so in warm-up order the archive's measured scan
    # started its workers again (stop 39: 4 workers, 39.7 s instead of 25.9 s).
    for _ in range(repeat):
        for name, run in reversed(runs.items()):
            c0 = cpu_snapshot(broker_pid)
            t0 = time.perf_counter()
            result = run()
            wall = time.perf_counter() - t0
            c1 = cpu_snapshot(broker_pid)
            m = out[name]
            assert result == (m["rows"], m["value_bytes"]), (name, result, m)
            if "wall_s" not in m or wall < m["wall_s"]:
                m["wall_s"] = wall
                m["cpu_s"] = cpu_spent(c0, c1)
    return out


def sql_ts(ms: int) -> str:
    return f"timestamp'{datetime.fromtimestamp(ms / 1000, UTC).isoformat()}'"


def fmt(m: dict[str, Any], fixed: float, scanned: int) -> dict[str, Any]:
    """Figures of one measured run; ``scanned``: the records the source reads for it."""
    cpu = m["cpu_s"]
    read_cpu = cpu["broker"] + cpu["s3_server"] + cpu["spark_jvm"] + cpu["python_workers"]
    return {
        "rows": m["rows"],
        "wall_s": round(m["wall_s"], 3),
        "first_run_s": round(m["first_s"], 2),
        "records_per_s": round(m["rows"] / m["wall_s"]),
        "records_read": scanned,
        "cpu_s": cpu,
        "cpu_us_per_record_read": round(read_cpu / scanned * 1e6, 2) if scanned else None,
        "wall_us_per_record_read_net_of_fixed_cost": (
            round(max(m["wall_s"] - fixed, 0.0) / scanned * 1e6, 2) if scanned else None
        ),
    }


def archive_plan(config: Path, topic: str, ending: str, w0: int | None, w1: int | None) -> Any:
    """kafka-archive's own plan for a read (the slices its input partitions carry)."""
    from rlmm.archive import RowBounds
    from rlmm.spark.options import parse_options
    from rlmm.spark.planning import plan

    options = parse_options(
        {"config": str(config), "subscribe": topic, "endingOffsets": ending,
         "minPartitions": str(SPARK_CORES)}
    )  # fmt: skip
    where = None if w0 is None else RowBounds(min_timestamp_ms=w0, max_timestamp_ms=w1)
    slices = plan(options, where)
    return {
        "slices": len(slices),
        "records": sum(s.until_offset - s.from_offset for s in slices),
        "bytes": sum(s.size_in_bytes for s in slices),
    }


def analysis(out: dict[str, Any], middle: int, records: int) -> dict[str, Any]:
    """What the targets would need, next to what was measured: CPU per side, and each
    measured wall time split into Spark's cost per query, its cost per input partition
    (times the partitions planned) and the rest (the records)."""

    def cpu(m: dict[str, Any]) -> float:
        c = m["cpu_s"]
        return float(c["broker"] + c["s3_server"] + c["spark_jvm"] + c["python_workers"])

    fixed = out["spark_fixed_cost_s"]

    def split(m: dict[str, Any], source: str, partitions: int) -> dict[str, float]:
        per_query = fixed["per_query"][source]
        per_partitions = max(fixed["per_input_partition"][source], 0.0) * partitions
        return {
            "wall": m["wall_s"],
            "spark_per_query": per_query,
            "spark_per_input_partition_x_partitions": round(per_partitions, 3),
            "records": round(max(m["wall_s"] - per_query - per_partitions, 0.0), 3),
        }

    full = out["full_scan"]
    a, b = full["a_kafka_source"], full["b_kafka_archive"]
    parts = full["input_partitions"]
    result: dict[str, Any] = {
        "full_scan_cpu_s": {"kafka_source": round(cpu(a), 2), "kafka_archive": round(cpu(b), 2)},
        "full_scan_cpu_ratio": round(cpu(a) / cpu(b), 2) if cpu(b) else None,
        "full_scan_kafka_archive_wall_for_target_s": round(a["wall_s"] / TARGETS["full_scan"], 3),
        "full_scan_wall_split_s": {
            "kafka_source": split(a, "kafka_source", parts["kafka_source"]),
            "kafka_archive": split(b, "kafka_archive", parts["kafka_archive"]),
        },
    }
    window = out["windows"].get(f"hour_{middle}")
    if window is not None:
        wa = window["a_kafka_source_where"]
        wb = window["b_kafka_archive_where_pushed_down"]
        wparts = window["input_partitions"]
        result.update(
            {
                f"window_hour_{middle}_kafka_archive_wall_for_target_s": round(
                    wa["wall_s"] / TARGETS["window"], 3
                ),
                f"window_hour_{middle}_wall_split_s": {
                    "kafka_source": split(wa, "kafka_source", wparts["kafka_source"]),
                    "kafka_archive": split(wb, "kafka_archive", wparts["kafka_archive"]),
                },
                f"window_hour_{middle}_records_read": {
                    "kafka_source": wa["records_read"],
                    "kafka_archive": wb["records_read"],
                    "kafka_archive_fraction": round(wb["records_read"] / records, 3),
                    "rows_in_window": window["rows"],
                },
            }
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--window-hours", type=int, default=1)
    parser.add_argument(
        "--window-at",
        default=None,
        help="comma-separated start hours of the windows (default: first, middle, last)",
    )
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="a Spark standalone cluster (master + 2 workers) reading the archive from S3",
    )
    args = parser.parse_args()
    if args.window_at is None:
        starts = sorted({0, args.hours // 2, args.hours - args.window_hours})
    else:
        starts = [int(h) for h in args.window_at.split(",")]
    middle = args.hours // 2
    bench_t0 = time.perf_counter()
    out: dict[str, Any] = {
        "bench": "spark_vs_kafka",
        "machine": machine(),
        "kafka": KAFKA_VERSION,
        "pyspark": SPARK_KAFKA_VERSION,
        "records": args.records,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "hours": args.hours,
        "window_hours": args.window_hours,
        "segment_ms": ROLL_MS,
        "segment_mb": args.segment_mb,
        "spark_master": (
            "standalone: a master and 2 one-core workers, client-mode driver"
            if args.cluster
            else f"local[{SPARK_CORES}]"
        ),
        "remote_storage": "s3 (moto's server on loopback)" if args.cluster else "local directory",
        "targets": {
            "full_scan_archive_vs_kafka_source": TARGETS["full_scan"],
            f"window_at_hour_{middle}_archive_vs_kafka_source": TARGETS["window"],
        },
    }
    jars = spark_kafka_jars()
    root = Path(tempfile.mkdtemp(prefix="rlmm-spark-vs-kafka-"))
    broker = ApacheKafkaBroker(root, heap="1g")
    spark = None
    failed: list[str] = []
    stack = contextlib.ExitStack()
    try:
        s3_endpoint = None
        master = f"local[{SPARK_CORES}]"
        conf = {"spark.sql.session.timeZone": "UTC"}
        if args.cluster:
            s3_endpoint = stack.enter_context(moto_process())
            for k, v in {**EXECUTOR_ENV, "AWS_DEFAULT_REGION": "us-east-1"}.items():
                os.environ[k] = v  # the sidecar's and the driver's own chain
            import boto3

            boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
                Bucket=S3_BUCKET
            )
            cluster = stack.enter_context(standalone_cluster(root / "spark-cluster"))
            master = cluster.master_url
            conf |= {f"spark.executorEnv.{k}": v for k, v in EXECUTOR_ENV.items()}
            conf |= {"spark.executor.memory": "768m", "spark.executor.cores": "1"}
        broker.start()
        assert broker.process is not None
        broker_pid = broker.process.pid
        topic = f"day-{uuid4().hex[:8]}"
        asyncio.run(
            create_topic(broker.bootstrap, topic, args.partitions, topic_configs(args.segment_mb))
        )
        now = int(time.time()) * 1000
        t_end = now - ROLL_MS - 60_000  # the roll record ("now") rolls the last segment
        t_start = t_end - args.hours * HOUR_MS
        t0 = time.perf_counter()
        produce(broker, root, topic, args, t_start, t_end)
        out["produce_s"] = round(time.perf_counter() - t0, 1)
        rolls = asyncio.run(roll(broker.bootstrap, topic, args.partitions, now))
        segments = wait_rolled(broker, topic, rolls)
        out["rolled_segments"] = segments
        out["log_mb"] = round(
            sum(f.stat().st_size for f in broker.data_dir.glob(f"{topic}-*/*.log")) / 1e6, 1
        )
        t0 = time.perf_counter()
        config, summary = offload(broker, root, topic, s3_endpoint)
        out["offload_s"] = round(time.perf_counter() - t0, 1)
        out["offload"] = {
            k: summary[k] for k in ("segments_copied", "bytes_copied", "errors", "warnings")
        }
        if summary["segments_copied"] != segments:
            raise RuntimeError(f"the sidecar copied {summary} of {segments} rolled segments")

        spark, startup = start_spark("rlmm-bench-spark-vs-kafka", jars, conf, master)
        out["spark_session_start_s"] = round(startup, 1)
        ending = json.dumps({topic: {str(p): o for p, o in rolls.items()}})
        tiny = json.dumps({topic: {str(p): FIXED_RECORDS for p in rolls}})

        def kafka(end: str = ending, parts: int = SPARK_CORES, **options: str) -> Any:
            reader = (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic)
                .option("minPartitions", str(parts))
            )
            if not options:
                reader = reader.option("startingOffsets", "earliest").option("endingOffsets", end)
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load()

        def archive(end: str = ending, **options: str) -> Any:
            reader = (
                spark.read.format("kafka-archive")
                .option("config", str(config))
                .option("subscribe", topic)
                .option("endingOffsets", end)
                .option("minPartitions", str(SPARK_CORES))
                # Every query loads its own DataFrame, so pruning is safe on any Spark
                # (docs/spark.md: before Spark 5 a pushed-down read is reused by later
                # queries of the same DataFrame, so auto leaves it off there).
                .option("filterPushdown", "true")
            )
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load()

        def fixed_cost(df: Callable[[], Any]) -> float:
            walls = []
            for _ in range(FIXED_RUNS + 1):  # the first one warms up
                t0 = time.perf_counter()
                n, _b = aggregate(df())
                walls.append(time.perf_counter() - t0)
                assert n == FIXED_RECORDS * args.partitions, n
            return min(walls[1:])

        full = timed(
            {"a": lambda: aggregate(kafka()), "b": lambda: aggregate(archive())},
            args.repeat,
            broker_pid,
        )
        windows = []
        for hour in starts:
            w0 = t_start + hour * HOUR_MS
            w1 = w0 + args.window_hours * HOUR_MS
            cond = f"timestamp >= {sql_ts(w0)} AND timestamp < {sql_ts(w1)}"
            by_ts = {"startingTimestamp": str(w0), "endingTimestamp": str(w1)}
            w = timed(
                {
                    "a": lambda c=cond: aggregate(kafka().where(c)),
                    "b": lambda c=cond: aggregate(archive().where(c)),
                    "c": lambda c=cond, o=by_ts: aggregate(kafka(**o).where(c)),
                    "d": lambda c=cond, o=by_ts: aggregate(archive(**o).where(c)),
                },
                args.repeat,
                broker_pid,
            )
            windows.append((hour, w0, w1, cond, by_ts, w))

        # Spark's cost per query (planning, scheduling, a 1,000-record read on 2 input
        # partitions), and per input partition (the same records on MANY_PARTITIONS);
        # measured last, on a warm session.
        tiny_parts = max(SPARK_CORES, args.partitions)
        fixed_a = fixed_cost(lambda: kafka(tiny))
        fixed_b = fixed_cost(lambda: archive(tiny))
        many_a = fixed_cost(lambda: kafka(tiny, MANY_PARTITIONS))
        per_records = str(FIXED_RECORDS * args.partitions // MANY_PARTITIONS)
        many_b = fixed_cost(lambda: archive(tiny, maxRecordsPerPartition=per_records))
        out["spark_fixed_cost_s"] = {
            "per_query": {"kafka_source": round(fixed_a, 3), "kafka_archive": round(fixed_b, 3)},
            "per_input_partition": {
                "kafka_source": round((many_a - fixed_a) / (MANY_PARTITIONS - tiny_parts), 4),
                "kafka_archive": round((many_b - fixed_b) / (MANY_PARTITIONS - tiny_parts), 4),
            },
            "input_partitions_of_the_many_query": {
                "kafka_source": kafka(tiny, MANY_PARTITIONS).rdd.getNumPartitions(),
                "kafka_archive": archive(
                    tiny, maxRecordsPerPartition=per_records
                ).rdd.getNumPartitions(),
            },
            "note": (
                f"best of {FIXED_RUNS} (after one) reads of {FIXED_RECORDS} records per"
                f" partition on {tiny_parts} input partitions (per query), and on"
                f" {MANY_PARTITIONS}: the difference per extra input partition (wall time"
                f" on {out['spark_master']})"
            ),
        }

        a, b = full["a"], full["b"]
        if not (a["rows"] == b["rows"] == args.records and a["value_bytes"] == b["value_bytes"]):
            failed.append(f"full scan: kafka {a['rows']}/{a['value_bytes']}, "
                          f"kafka-archive {b['rows']}/{b['value_bytes']}, "
                          f"expected {args.records} rows")  # fmt: skip
        full_ratio = a["wall_s"] / b["wall_s"]
        planned = archive_plan(config, topic, ending, None, None)
        out["full_scan"] = {
            "query": "count(*), sum(length(value)) over every record",
            "rows": a["rows"],
            "value_bytes": a["value_bytes"],
            "input_partitions": {
                "kafka_source": kafka().rdd.getNumPartitions(),
                "kafka_archive": archive().rdd.getNumPartitions(),
            },
            "kafka_archive_plan": planned,
            "a_kafka_source": fmt(a, fixed_a, args.records),
            "b_kafka_archive": fmt(b, fixed_b, planned["records"]),
            "archive_vs_kafka_source": round(full_ratio, 2),
            "target": TARGETS["full_scan"],
            "met": full_ratio >= TARGETS["full_scan"],
        }

        out["windows"] = {}
        for hour, w0, w1, cond, by_ts, w in windows:
            wa, wb, wc, wd = w["a"], w["b"], w["c"], w["d"]
            sides = {(m["rows"], m["value_bytes"]) for m in (wa, wb, wc, wd)}
            if len(sides) != 1 or wa["rows"] == 0:
                failed.append(f"window at hour {hour}: (rows, value bytes) differ or 0: {sides}")
            ratio = wa["wall_s"] / wb["wall_s"]
            planned = archive_plan(config, topic, ending, w0, w1 - 1)
            entry: dict[str, Any] = {
                "where": cond,
                "rows": wa["rows"],
                "value_bytes": wa["value_bytes"],
                "input_partitions": {
                    "kafka_source": kafka().where(cond).rdd.getNumPartitions(),
                    "kafka_archive": archive().where(cond).rdd.getNumPartitions(),
                    "kafka_source_by_timestamp": kafka(**by_ts).where(cond).rdd.getNumPartitions(),
                },
                "kafka_archive_plan": planned,
                "a_kafka_source_where": fmt(wa, fixed_a, args.records),
                "b_kafka_archive_where_pushed_down": fmt(wb, fixed_b, planned["records"]),
                "c_kafka_source_starting_ending_timestamp": fmt(wc, fixed_a, wc["rows"]),
                "d_kafka_archive_starting_ending_timestamp": fmt(wd, fixed_b, wd["rows"]),
                "archive_vs_kafka_source": round(ratio, 2),
                "archive_vs_kafka_source_by_timestamp": round(wc["wall_s"] / wb["wall_s"], 2),
                "archive_by_timestamp_vs_kafka_source_by_timestamp": round(
                    wc["wall_s"] / wd["wall_s"], 2
                ),
            }
            if hour == middle:
                entry["target"] = TARGETS["window"]
                entry["met"] = ratio >= TARGETS["window"]
            out["windows"][f"hour_{hour}"] = entry
        out["where_the_time_goes"] = analysis(out, middle, args.records)
        out["failed"] = failed
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        stack.close()
        shutil.rmtree(root, ignore_errors=True)
    out["bench_wall_s"] = round(time.perf_counter() - bench_t0, 1)
    print(json.dumps(out, indent=2))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
