"""Benchmark: reading archived 100-byte records (a) through the archive reader into Arrow
outside Spark, (b) through ``format("kafka-archive")`` on local[2], (c) with
kafka-python decoding the same segment files; uncompressed and zstd; one JSON document.

The archive is built by bench/archive_read.py's ``build_archive`` (PartitionDirWriter
segments copied through the manager: STARTED -> copy -> FINISHED). (a) and (c) are
single-threaded and measured in CPU seconds (per core); (b) runs on 2 cores, measured
in wall seconds and in CPU seconds of the whole process tree (JVM + Python workers),
after one warm-up query (JVM JIT, Python workers; its time is reported), and with
Spark's fixed cost per query (planning, a 1,000-record read) measured separately.
Session start (about 6 s on an idle machine) is reported and not counted. Per-record
CPU is reported gross (the query's CPU / rows) and net of the fixed cost (the full
query's CPU minus a 1,000-record query's, per extra record). (d) Spark's own share:
a Python data source that yields one pre-built Arrow batch of the same schema over
and over (no decoding) read the same way; its JVM CPU per row is what Spark spends
turning Arrow into rows for any Python data source of these columns, and with the
``value`` column alone, what column pruning would save if Spark's Python data
source API offered it (pyspark 4.2 does not: only ``pushFilters``).
The issue asks for about 1 GiB; on a shared 2-core machine the default is ~200 MiB of
uncompressed segments (``--records``). Targets: (a) >= 1M records/s per core
uncompressed; (b) >= 50% of (a) per core; (a) >= 10x (c).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bench._machine import machine
from bench._spark import SPARK_CORES, start_spark
from bench.archive_read import (
    archive_segment_bytes,
    best,
    build_archive,
    read_archive,
    read_kafka_python,
)
from remote.segments import PartitionDir
from rlmm.archive import close_remote_storage
from rlmm.config import RlmmConfig

MB = 1 << 20


def tree_cpu_seconds() -> dict[str, float]:
    """CPU seconds of this process's children: the JVM, and Spark's Python workers."""
    import psutil

    total = {"jvm": 0.0, "python": 0.0}
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            kind = "jvm" if child.name() == "java" else "python"
        except psutil.Error:
            continue
        total[kind] += t.user + t.system
    return total


class _PrebuiltSource(DataSource):
    """(d): one pre-built Arrow batch of Spark's Kafka columns (or of ``columns``), yielded
    until ``rows`` rows per partition; no decoding, so all the cost is Spark's."""

    @classmethod
    def name(cls) -> str:
        return "rlmm-bench-prebuilt"

    def schema(self) -> Any:
        from pyspark.sql.types import StructType

        from rlmm.spark.source import kafka_struct

        wanted = self.options.get("columns", "").split(",")
        fields = [f for f in kafka_struct(False).fields if f.name in wanted or wanted == [""]]
        return StructType(fields)

    def reader(self, schema: Any) -> DataSourceReader:
        return _PrebuiltReader(int(self.options["rows"]), schema.fieldNames())


class _PrebuiltReader(DataSourceReader):
    def __init__(self, rows: int, names: list[str]) -> None:
        self.rows, self.names = rows, names

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(SPARK_CORES)]

    def read(self, partition: InputPartition) -> Any:
        import pyarrow as pa

        from rlmm.archive.columns import TIMESTAMP_TYPE, kafka_schema

        n = PREBUILT_BATCH_ROWS
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([str(i).encode() for i in range(n)], pa.binary()),
                pa.array([b"v" * 100] * n, pa.binary()),
                pa.array(["bench-none"] * n, pa.string()),
                pa.array([0] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000 + i for i in range(n)], TIMESTAMP_TYPE),
                pa.array([0] * n, pa.int32()),
            ],
            schema=kafka_schema(False),
        ).select(self.names)
        for _ in range(max(self.rows // SPARK_CORES // n, 1)):
            yield batch


PREBUILT_BATCH_ROWS = 32 * 1024


def prebuilt_query(spark: Any, rows: int, columns: str = "") -> int:
    df = (
        spark.read.format(_PrebuiltSource.name())
        .option("rows", str(rows))
        .option("columns", columns)
        .load()
    )
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    return int(row["n"])


def spark_query(spark: Any, config: RlmmConfig, topic: str, end: int | None = None) -> int:
    """Rows read by Spark; every value reaches the JVM (sum of lengths). minPartitions
    lets both cores work on a partition held in one (compressed) segment."""
    reader = (
        spark.read.format("kafka-archive")
        .option("subscribe", topic)
        .option("minPartitions", str(SPARK_CORES))
        .option("rlmm.data_dir", str(config.data_dir))
        .option("rlmm.eventlog.partitions", str(config.eventlog["partitions"]))
    )
    if end is not None:
        reader = reader.option("endingOffsets", json.dumps({topic: {"0": end}}))
    row = reader.load().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    return int(row["n"])


def measure_spark(spark: Any, config: RlmmConfig, topic: str, repeat: int) -> dict[str, Any]:
    return measure_query(
        lambda: spark_query(spark, config, topic),
        lambda: spark_query(spark, config, topic, end=1000),
        repeat,
    )


def measure_query(full: Any, small: Any, repeat: int) -> dict[str, Any]:
    """Wall and CPU (JVM, Python workers) of ``full``, best of ``repeat`` after a warm-up,
    and CPU per record net of the fixed cost: ``full`` minus ``small`` (best of 3)."""
    warmup, _ = _timed(full)  # JIT, Python workers
    fixed_walls, fixed_cpus, small_rows = [], [], 0
    for _ in range(3):
        c0 = tree_cpu_seconds()
        wall, small_rows = _timed(small)
        c1 = tree_cpu_seconds()
        fixed_walls.append(wall)
        fixed_cpus.append({kind: c1[kind] - c0[kind] for kind in c1})
    walls, cpus, rows = [], [], 0
    for _ in range(repeat):
        c0 = tree_cpu_seconds()
        wall, rows = _timed(full)
        walls.append(wall)
        c1 = tree_cpu_seconds()
        cpus.append({kind: c1[kind] - c0[kind] for kind in c1})
    cpu = min(cpus, key=lambda c: c["jvm"] + c["python"])
    fixed = min(fixed_cpus, key=lambda c: c["jvm"] + c["python"])
    extra = max(rows - small_rows, 1)
    return {
        "rows": rows,
        "wall_s": min(walls),
        "cpu_s": cpu["jvm"] + cpu["python"],
        "jvm_cpu_s": cpu["jvm"],
        "python_cpu_s": cpu["python"],
        "fixed_s": min(fixed_walls),
        "fixed_jvm_cpu_s": fixed["jvm"],
        "fixed_python_cpu_s": fixed["python"],
        "net_jvm_cpu_us_per_record": (cpu["jvm"] - fixed["jvm"]) / extra * 1e6,
        "net_python_cpu_us_per_record": (cpu["python"] - fixed["python"]) / extra * 1e6,
        "first_query_s": warmup,
    }


def measure_prebuilt(spark: Any, rows: int, repeat: int) -> dict[str, Any]:
    """(d): Spark's own CPU per row for a Python data source of these columns."""
    out = {}
    for label, columns in (("all_columns", ""), ("value_only", "value")):
        m = measure_query(
            lambda c=columns: prebuilt_query(spark, rows, c),
            lambda c=columns: prebuilt_query(spark, 1, c),
            repeat,
        )
        out[label] = {
            "rows": m["rows"],
            "wall_s": round(m["wall_s"], 2),
            "jvm_cpu_us_per_record": round(m["jvm_cpu_s"] / m["rows"] * 1e6, 2),
            "python_worker_cpu_us_per_record": round(m["python_cpu_s"] / m["rows"] * 1e6, 2),
            "jvm_cpu_us_per_record_net": round(m["net_jvm_cpu_us_per_record"], 2),
            "python_worker_cpu_us_per_record_net": round(m["net_python_cpu_us_per_record"], 2),
        }
    return out


def _timed(run: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = run()
    return time.perf_counter() - t0, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_800_000)
    parser.add_argument("--baseline-records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    out: dict[str, Any] = {
        "bench": "spark_read",
        "machine": machine(),
        "records": args.records,
        "value_bytes": 100,
        "spark_master": f"local[{SPARK_CORES}]",
        "note": (
            "about 200 MiB of uncompressed segments instead of the issue's 1 GiB (shared"
            " 2-core machine). Spark per core: wall figures divide by 2 cores and suffer"
            " from other load on the machine; b_per_cpu_second_vs_a_per_core compares CPU"
            " seconds (JVM + Python workers) and is the per-core figure to read there."
        ),
        "targets": {
            "archive_records_per_s_per_core_uncompressed": 1_000_000,
            "spark_per_core_vs_archive_per_core": 0.5,
            "archive_vs_kafka_python": 10,
        },
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        config = build_archive(root, args.records)
        out["build_s"] = round(time.perf_counter() - t0, 1)
        spark, startup = start_spark("rlmm-bench-spark-read")
        out["spark_session_start_s"] = round(startup, 1)
        try:
            for codec in ("none", "zstd"):
                topic = f"bench-{codec}"
                size = archive_segment_bytes(config, topic)
                cpu, _, rows = best(args.repeat, lambda t=topic: read_archive(config, t))
                pdir = PartitionDir(root / "logs" / f"{topic}-0")
                paths = [s.log_path for s in pdir.segments()]
                base_cpu, _, base_rows = best(
                    args.repeat, lambda p=paths: read_kafka_python(p, args.baseline_records)
                )
                s = measure_spark(spark, config, topic, args.repeat)
                assert s["rows"] == rows == args.records, (s["rows"], rows)
                archive_rps = rows / cpu
                spark_wall_per_core = rows / s["wall_s"] / SPARK_CORES
                spark_net_per_core = rows / max(s["wall_s"] - s["fixed_s"], 1e-9) / SPARK_CORES
                out["results"][codec] = {
                    "segment_mb": round(size / MB, 1),
                    "a_archive_records_per_s_per_core": round(archive_rps),
                    "a_archive_mb_per_s_per_core": round(size / cpu / MB, 1),
                    "b_spark_wall_s": round(s["wall_s"], 2),
                    "b_spark_fixed_cost_s": round(s["fixed_s"], 2),
                    "b_spark_first_query_s": round(s["first_query_s"], 2),
                    "b_spark_records_per_s": round(rows / s["wall_s"]),
                    "b_spark_mb_per_s": round(size / s["wall_s"] / MB, 1),
                    "b_spark_records_per_s_per_core_wall": round(spark_wall_per_core),
                    "b_spark_records_per_s_per_core_net_of_fixed_cost": round(spark_net_per_core),
                    "b_spark_records_per_s_per_cpu_second": round(rows / s["cpu_s"]),
                    "b_spark_python_worker_cpu_us_per_record": round(
                        s["python_cpu_s"] / rows * 1e6, 2
                    ),
                    "b_spark_jvm_cpu_us_per_record": round(s["jvm_cpu_s"] / rows * 1e6, 2),
                    "b_spark_python_worker_cpu_us_per_record_net": round(
                        s["net_python_cpu_us_per_record"], 2
                    ),
                    "b_spark_jvm_cpu_us_per_record_net": round(s["net_jvm_cpu_us_per_record"], 2),
                    "b_spark_fixed_cost_cpu_s": {
                        "jvm": round(s["fixed_jvm_cpu_s"], 2),
                        "python": round(s["fixed_python_cpu_s"], 2),
                    },
                    "a_archive_cpu_us_per_record": round(cpu / rows * 1e6, 2),
                    "c_kafka_python_records_per_s_per_core": round(base_rows / base_cpu),
                    "c_kafka_python_rows_measured": base_rows,
                    "b_per_core_vs_a_per_core_wall": round(spark_wall_per_core / archive_rps, 2),
                    "b_per_core_vs_a_per_core_net": round(spark_net_per_core / archive_rps, 2),
                    "b_per_cpu_second_vs_a_per_core": round(rows / s["cpu_s"] / archive_rps, 2),
                    "a_vs_c": round(archive_rps / (base_rows / base_cpu), 1),
                }
            spark.dataSource.register(_PrebuiltSource)
            out["d_spark_prebuilt_batches"] = measure_prebuilt(spark, args.records, args.repeat)
        finally:
            spark.stop()
            close_remote_storage()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
