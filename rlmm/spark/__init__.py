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

from typing import Any

from rlmm.spark.errors import KafkaArchiveOptionError
from rlmm.spark.options import KafkaArchiveOptions, parse_options


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
