"""The benchmarks' Spark session: local mode on ``SPARK_CORES`` cores, rlmm's source
registered, Python workers on this interpreter. Invariant: the caller owns the
session it gets and stops it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SPARK_CORES = 2


def start_spark(
    app: str,
    jars: Sequence[Path] = (),
    conf: Mapping[str, str] | None = None,
    master: str = f"local[{SPARK_CORES}]",
) -> tuple[Any, float]:
    """A session named ``app`` on ``master`` (default ``local[SPARK_CORES]``) with
    ``jars`` and extra ``conf``, ``kafka-archive`` registered; and the seconds it took
    to start."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import rlmm.spark

    t0 = time.perf_counter()
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(SPARK_CORES))
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    rlmm.spark.register(spark)
    return spark, time.perf_counter() - t0
