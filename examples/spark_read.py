"""Read archived Kafka segments with Spark: ``format("kafka")`` becomes ``format("kafka-archive")``.

A batch job that read the live brokers::

    df = (spark.read.format("kafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "orders")
          .load())

reads what the offloader archived with one word changed and the rlmm config named
(``kafka.*`` options are accepted and ignored, so they may stay)::

    rlmm.spark.register(spark)
    df = (spark.read.format("kafka-archive")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("config", "demo-data/demo.toml")
          .option("subscribe", "orders")
          .load())

Run: ``python examples/spark_read.py --config demo-data/demo.toml
[--expected demo-data/expected.json] [--subscribe orders] [--isolation-level read_committed]``.
It reads on ``local[2]``, prints a few rows and the records per partition; with
``--expected`` it checks the counts (and first / last offsets) against what was
written and exits 1 on a mismatch. Without a Java runtime it says how to get one and
exits 0 with a "skipped" line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

JAVA_HINT = (
    "Spark needs a Java runtime (17 or newer): install one (Debian/Ubuntu:"
    " `sudo apt-get install openjdk-17-jre-headless`; macOS: `brew install openjdk@17`)"
    " or point JAVA_HOME at one"
)
LEVELS = ("read_uncommitted", "read_committed")


def java_found() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home and (Path(home) / "bin" / "java").exists()) or shutil.which("java") is not None


def expected_partitions(data: Any) -> dict[tuple[str, int], Mapping[str, int]]:
    """``expected.json`` -> {(topic, partition): {"read_committed": n, ...}}.

    ``make demo`` writes ``{"topics": {topic: {"partitions": {partition: {...}}}}}``;
    ``{"topics": {topic: {partition: {...}}}}`` and ``{"partitions": [{"topic": t,
    "partition": p, ...}, ...]}`` are read too.
    """
    if isinstance(data, Mapping) and isinstance(data.get("partitions"), list):
        return {(e["topic"], int(e["partition"])): e for e in data["partitions"]}
    topics = data.get("topics") if isinstance(data, Mapping) else None
    if not isinstance(topics, Mapping):
        raise SystemExit("expected file: neither a 'topics' mapping nor a 'partitions' list")
    out = {}
    for topic, entry in topics.items():
        partitions = entry.get("partitions", entry) if isinstance(entry, Mapping) else {}
        for p, want in partitions.items():
            if isinstance(want, Mapping):
                out[(topic, int(p))] = want
    return out


def check(
    counts: Mapping[tuple[str, int], tuple[int, int, int]],
    expected: Mapping[tuple[str, int], Mapping[str, int]],
    level: str,
) -> list[str]:
    """Mismatches between what Spark read and what was written (empty: all good):
    the record count under ``level``; the first and last offsets read (exact under
    read_uncommitted); every offset read inside the archived ``start_offset`` ..
    ``end_offset`` (inclusive, as Kafka's segment metadata has them)."""
    problems = []
    for key in sorted(set(counts) | set(expected)):
        name = f"{key[0]}-{key[1]}"
        if key not in expected:
            problems.append(f"{name}: read {counts[key][0]} records, none expected")
            continue
        want = expected[key]
        n, first, last = counts.get(key, (0, -1, -1))
        if level in want and n != int(want[level]):
            problems.append(f"{name}: read {n} records under {level}, expected {want[level]}")
        for field, got in (("first_offset", first), ("last_offset", last)):
            if level == "read_uncommitted" and field in want and got != int(want[field]):
                problems.append(f"{name}: {field} is {got}, expected {want[field]}")
        lo, hi = want.get("start_offset"), want.get("end_offset")
        if n and lo is not None and hi is not None and not lo <= first <= last <= hi:
            problems.append(f"{name}: read offsets {first}..{last}, outside archived {lo}..{hi}")
    return problems


def run(spark: Any, args: argparse.Namespace) -> int:
    """The read on an existing SparkSession; the process exit code."""
    import rlmm.spark

    rlmm.spark.register(spark)
    expected = None
    if args.expected is not None:
        expected = expected_partitions(json.loads(Path(args.expected).read_text()))
    # was: spark.read.format("kafka"); kafka.* options may stay (they are ignored)
    reader = spark.read.format("kafka-archive").option("config", args.config)
    if args.subscribe:
        reader = reader.option("subscribe", args.subscribe)
    elif expected:
        reader = reader.option("subscribe", ",".join(sorted({t for t, _ in expected})))
    else:
        reader = reader.option("subscribePattern", ".*")
    levels = [args.isolation_level] if args.isolation_level else list(LEVELS)
    if expected is None:
        levels = levels[:1]
    failed = False
    for n, level in enumerate(levels):
        counts = read_counts(reader.option("isolationLevel", level), level, show_rows=n == 0)
        if expected is None:
            continue
        problems = check(counts, expected, level)
        for problem in problems:
            print(f"MISMATCH {problem}")
        failed = failed or bool(problems)
        if not problems:
            total = sum(c[0] for c in counts.values())
            print(f"OK ({level}): {len(counts)} partitions, {total} records as expected")
    return 1 if failed else 0


def read_counts(
    reader: Any, level: str, *, show_rows: bool
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """Load, print a few rows and the per-partition counts; (records, first, last)."""
    from pyspark.sql import functions as F

    df = reader.load()
    parts = df.rdd.getNumPartitions()
    print(f"kafka-archive ({level}): {parts} input partition{'' if parts == 1 else 's'}")
    if show_rows:
        # Every row the where keeps is shown, so no task is cut short by show()'s limit
        # (Spark's Python worker then prints a BrokenPipeError).
        df.where("offset < 2").selectExpr(
            "topic", "partition", "offset", "timestamp", "CAST(key AS STRING) AS key",
            "length(value) AS value_bytes",
        ).orderBy("topic", "partition", "offset").show(truncate=False)  # fmt: skip
    per_partition = (
        df.groupBy("topic", "partition")
        .agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
             F.max("offset").alias("last_offset"))
        .orderBy("topic", "partition")
    )  # fmt: skip
    per_partition.show(truncate=False)
    return {
        (r["topic"], r["partition"]): (r["records"], r["first_offset"], r["last_offset"])
        for r in per_partition.collect()
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", required=True, help="the rlmm TOML (demo-data/demo.toml)")
    parser.add_argument("--expected", help="expected.json written by `make demo`")
    parser.add_argument("--subscribe", help="topics (comma-separated); default: all")
    parser.add_argument(
        "--isolation-level",
        choices=LEVELS,
        help="default: read_uncommitted, or both levels when checking --expected",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not java_found():
        print(f"{JAVA_HINT}.")
        print("spark_read: skipped (no Java runtime)")
        return 0
    # Spark's Python workers must run this interpreter (it has rlmm and pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rlmm-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
