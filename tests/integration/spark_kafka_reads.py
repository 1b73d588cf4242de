"""Child process of the Spark-vs-archive test: read a topic with Spark's own Kafka source
(and, when given an rlmm config, with ``kafka-archive``) and write the rows as JSON.

Run as ``python -m tests.integration.spark_kafka_reads REQUEST.json``. REQUEST holds
``bootstrap``, ``topic``, ``ending`` ({partition: exclusive end offset}), ``isolation``
levels to read at, ``jars`` (Spark's Kafka source, for ``spark.jars``), optional
``rlmm_config``, ``filters`` (SQL conditions: each read is done again with
``.where(condition)``, keyed ``<source>/<isolation>/<condition>``), ``time_options``
(Spark's timestamp options, such as ``startingTimestamp``: read again with them, at
the first isolation level only, keyed ``<source>/<isolation>/options``) and ``output``.
It runs in its own process because ``spark.jars`` is fixed when a JVM starts: the
test session's shared Spark JVM has no Kafka source.

Invariant: one row per record, every column of Spark's Kafka source, in
(partition, offset) order; bytes as hex so the JSON compares exactly.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def rows(df: Any) -> list[dict[str, Any]]:
    out = []
    for r in df.orderBy("partition", "offset").collect():
        out.append(
            {
                "key": None if r["key"] is None else bytes(r["key"]).hex(),
                "value": None if r["value"] is None else bytes(r["value"]).hex(),
                "topic": r["topic"],
                "partition": r["partition"],
                "offset": r["offset"],
                "timestamp": r["timestamp"].isoformat(),
                "timestampType": r["timestampType"],
                "headers": [
                    [h["key"], None if h["value"] is None else bytes(h["value"]).hex()]
                    for h in (r["headers"] or [])
                ],
            }
        )
    return out


def main(request_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rlmm-spark-kafka-vs-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars", ",".join(request["jars"]))
        .getOrCreate()
    )
    # INFO on purpose: Spark's Kafka source of another release than pyspark fails as
    # soon as it logs at INFO (NoClassDefFoundError), so the jars must be in step.
    spark.sparkContext.setLogLevel("INFO")
    try:
        topic = request["topic"]
        ending = json.dumps({topic: {str(p): o for p, o in request["ending"].items()}})
        result: dict[str, Any] = {}
        filters = request.get("filters", [])
        for isolation in request["isolation"]:
            live = (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", request["bootstrap"])
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", ending)
                .option("includeHeaders", "true")
                .option("kafka.isolation.level", isolation)
                .load()
                # Read from the broker once: each condition below is Spark filtering
                # these rows (the Kafka source pushes no filter down), as on a re-read.
                .cache()
            )
            result[f"kafka/{isolation}"] = rows(live)
            for condition in filters:
                result[f"kafka/{isolation}/{condition}"] = rows(live.where(condition))
            time_options = (
                request.get("time_options") if isolation == request["isolation"][0] else None
            )
            if time_options:
                timed = spark.read.format("kafka")
                for key, value in {
                    "kafka.bootstrap.servers": request["bootstrap"],
                    "subscribe": topic,
                    "includeHeaders": "true",
                    "kafka.isolation.level": isolation,
                    **time_options,
                }.items():
                    timed = timed.option(key, value)
                result[f"kafka/{isolation}/options"] = rows(timed.load())
            if request.get("rlmm_config"):
                import rlmm.spark

                rlmm.spark.register(spark)
                archived = (
                    spark.read.format("kafka-archive")
                    .option("config", request["rlmm_config"])
                    .option("subscribe", topic)
                    .option("endingOffsets", ending)
                    .option("includeHeaders", "true")
                    .option("kafka.isolation.level", isolation)
                    # Pruning on, whatever the Spark version; so one load() per query
                    # (docs/spark.md: Spark before 5.0 reuses a pushed-down read).
                    .option("filterPushdown", "true")
                )
                result[f"kafka-archive/{isolation}"] = rows(archived.load())
                for condition in filters:
                    # Pushed into kafka-archive (Spark still applies it after).
                    result[f"kafka-archive/{isolation}/{condition}"] = rows(
                        archived.load().where(condition)
                    )
                if time_options:
                    timed = archived
                    for key, value in time_options.items():
                        timed = timed.option(key, value)
                    # Without endingOffsets: the timestamp options win, as in Spark.
                    result[f"kafka-archive/{isolation}/options"] = rows(timed.load())
        Path(request["output"]).write_text(json.dumps(result))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
