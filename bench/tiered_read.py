"""Benchmark: a topic that lives only in Kafka's remote tier, read by Spark two ways.

An Apache Kafka 4.1.1 broker (the suite's pinned release, one KRaft node) tiers with
Kafka's own RemoteLogManager, TopicBasedRemoteLogMetadataManager and LocalTieredStorage.
Kafka's ProducerPerformance writes ``--records`` records of ``--record-size`` bytes to
a ``--partitions`` topic with ``remote.storage.enable=true``; Kafka tiers the rolled
segments and deletes the local copies (``local.retention.ms=1000``), so everything
read lives only under ``rsm.config.dir``.

In one Spark session (``local[2]``): (a) Spark's own ``format("kafka")`` reads the
tiered offsets through the broker (which fetches them from the remote tier), and (b)
``format("kafka-archive")`` reads the same offsets straight from LocalTieredStorage's
files, with the metadata from the cluster's ``__remote_log_metadata``. Both queries
touch every value (``sum(length(value))``); each runs once to warm up (JIT, Python
workers), then ``--repeat`` times (best wall time counted). Target: (b) >= 3x (a).
Prints ONE JSON document. Usage:
  python bench/tiered_read.py [--records 2000000] [--record-size 100] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from bench._spark import SPARK_CORES, start_spark
from bench._topic import create_topic, local_bases, producer_performance, roll
from tests.fixtures.apache_kafka import (
    KAFKA_VERSION,
    METADATA_PARTITIONS,
    ApacheKafkaBroker,
    spark_kafka_jars,
)

SEGMENT_BYTES = 16 << 20


TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": str(SEGMENT_BYTES),
    "segment.ms": "600000",
    "local.retention.ms": "1000",
    "retention.ms": "-1",
}


def wait_tiered(broker: ApacheKafkaBroker, topic: str, rolls: dict[int, int]) -> dict[int, int]:
    """Until one local segment per partition is left (the rest tiered and deleted
    locally); returns its base offset per partition (the end of what is tiered)."""
    deadline = time.monotonic() + 600
    while True:
        local = {p: local_bases(broker, topic, p) for p in rolls}
        if all(len(b) == 1 and b[0] >= rolls[p] for p, b in local.items()):
            return {p: b[0] for p, b in local.items()}
        if time.monotonic() > deadline:
            raise RuntimeError(f"not tiered within 600 s: local segments {local}")
        time.sleep(1)


def query(reader: Any) -> tuple[int, int]:
    row = reader.load().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    return int(row["n"]), int(row["b"] or 0)


def timed(run: Any, repeat: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    first = run()
    warmup = time.perf_counter() - t0
    walls = []
    result = first
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        walls.append(time.perf_counter() - t0)
    assert result == first, (result, first)
    return {"rows": result[0], "value_bytes": result[1], "wall_s": min(walls), "first_s": warmup}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    out: dict[str, Any] = {
        "bench": "tiered_read",
        "machine": machine(),
        "kafka": KAFKA_VERSION,
        "records": args.records,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "spark_master": f"local[{SPARK_CORES}]",
        "target": {"archive_vs_kafka_source": 3.0},
    }
    jars = spark_kafka_jars()
    root = Path(tempfile.mkdtemp(prefix="rlmm-tiered-bench-"))
    broker = ApacheKafkaBroker(root, heap="1g")
    spark = None
    try:
        broker.start()
        topic = f"tiered-{uuid4().hex[:8]}"
        asyncio.run(create_topic(broker.bootstrap, topic, args.partitions, TOPIC_CONFIGS))
        t0 = time.perf_counter()
        producer_performance(broker, topic, args.records, args.record_size)
        out["produce_s"] = round(time.perf_counter() - t0, 1)
        rolls = asyncio.run(roll(broker.bootstrap, topic, args.partitions))
        t0 = time.perf_counter()
        ends = wait_tiered(broker, topic, rolls)
        out["tier_wait_s"] = round(time.perf_counter() - t0, 1)
        tiered = broker.remote_dir / "kafka-tiered-storage"
        out["tiered_log_mb"] = round(
            sum(f.stat().st_size for f in tiered.rglob(f"{topic}-*/*.log")) / 1e6, 1
        )
        config = root / "rlmm.toml"
        config.write_text(
            f'data_dir = "{root / "rlmm"}"\n[eventlog]\ntype = "kafka"\n'
            f'bootstrap_servers = "{broker.bootstrap}"\npartitions = {METADATA_PARTITIONS}\n'
            f'[remote]\ntype = "local-tiered-storage"\ndir = "{broker.remote_dir}"\n'
        )
        ending = json.dumps({topic: {str(p): o for p, o in ends.items()}})
        spark, startup = start_spark("rlmm-bench-tiered-read", jars)
        out["spark_session_start_s"] = round(startup, 1)

        def kafka() -> tuple[int, int]:
            return query(
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", ending)
                .option("minPartitions", str(SPARK_CORES))
            )

        def archive() -> tuple[int, int]:
            return query(
                spark.read.format("kafka-archive")
                .option("config", str(config))
                .option("subscribe", topic)
                .option("endingOffsets", ending)
                .option("minPartitions", str(SPARK_CORES))
            )

        a = timed(kafka, args.repeat)
        b = timed(archive, args.repeat)
        assert a["rows"] == b["rows"] == sum(ends.values()), (a, b, ends)
        out["results"] = {
            "rows": a["rows"],
            "a_spark_kafka_source_wall_s": round(a["wall_s"], 2),
            "a_first_query_s": round(a["first_s"], 2),
            "a_records_per_s": round(a["rows"] / a["wall_s"]),
            "b_kafka_archive_wall_s": round(b["wall_s"], 2),
            "b_first_query_s": round(b["first_s"], 2),
            "b_records_per_s": round(b["rows"] / b["wall_s"]),
            "archive_vs_kafka_source": round(a["wall_s"] / b["wall_s"], 2),
        }
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
