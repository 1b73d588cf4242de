"""The PySpark data source ``kafka-archive``: batch reads of archived Kafka segments.

Usage::

    import rlmm.spark
    rlmm.spark.register(spark)
    df = (spark.read.format("kafka-archive")
          .option("config", "rlmm.toml").option("subscribe", "orders").load())

Invariant: ``import rlmm.spark`` is cheap and works without pyspark installed; the
data source class (which subclasses pyspark's) loads on first use, and a missing
pyspark is an error naming the ``spark`` extra.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from typing import Any

from rlmm.spark.errors import KafkaArchiveOptionError
from rlmm.spark.options import KafkaArchiveOptions, parse_options

log = logging.getLogger(__name__)


def _source_module() -> Any:
    try:
        import rlmm.spark.source as source
    except ImportError as e:
        raise ImportError(
            f"the kafka-archive Spark source needs pyspark: pip install 'rlmm[spark]' ({e})"
        ) from e
    return source


def register(spark: Any) -> None:
    """Register ``format("kafka-archive")`` with a SparkSession (idempotent)."""
    spark.dataSource.register(_source_module().KafkaArchiveDataSource)
    worker = os.environ.get("PYSPARK_PYTHON") or shutil.which("python3")
    if worker is None or os.path.realpath(worker) != os.path.realpath(sys.executable):
        # Spark's workers run PYSPARK_PYTHON (default: python3 on PATH), which may lack
        # rlmm and pyarrow; say so now rather than with a worker's ImportError later.
        log.warning(
            "kafka-archive: Spark's Python workers will run %s, not this interpreter (%s);"
            " if it lacks rlmm[spark], set PYSPARK_PYTHON=%s before the session starts",
            worker or "python3",
            sys.executable,
            sys.executable,
        )


def __getattr__(name: str) -> Any:
    if name == "KafkaArchiveDataSource":
        return _source_module().KafkaArchiveDataSource
    raise AttributeError(f"module 'rlmm.spark' has no attribute {name!r}")


__all__ = [
    "KafkaArchiveDataSource",
    "KafkaArchiveOptionError",
    "KafkaArchiveOptions",
    "parse_options",
    "register",
]
