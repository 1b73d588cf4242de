"""The PySpark data source ``kafka-archive``: batch reads of archived Kafka segments.

Usage::

    import rlmm.spark
    rlmm.spark.register(spark)
    df = (spark.read.format("kafka-archive")
          .option("config", "rlmm.toml").option("subscribe", "orders").load())

``register`` also sets ``spark.sql.python.filterPushdown.enabled`` to true in the
session (see :func:`enable_filter_pushdown`), and reads the session's ``spark.rlmm.*``
Spark conf (rlmm settings, below a read's ``rlmm.*`` options): a Python data source runs
in a worker process without a SparkSession, so the conf travels with the registered
class; set it before ``register`` (or register again after changing it).

Invariant: ``import rlmm.spark`` is cheap and works without pyspark installed; the
data source class (``rlmm.spark.source.KafkaArchiveDataSource``, which subclasses
pyspark's) loads when ``register`` runs, and a missing pyspark is an error naming the
``spark`` extra.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from rlmm.spark.errors import KafkaArchiveOptionError, WorkerPythonError
from rlmm.spark.options import CONF_PREFIX, KafkaArchiveOptions, conf_settings, parse_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def register(spark: SparkSession) -> None:
    """Register ``format("kafka-archive")`` with a SparkSession (idempotent).

    Raises WorkerPythonError when Spark's Python workers would run an interpreter that
    cannot import rlmm and pyarrow (found out now, not as a worker's bare
    ``ModuleNotFoundError`` in the middle of a job)."""
    configured = None
    with contextlib.suppress(Exception):
        configured = spark.conf.get("spark.pyspark.python", None)
    worker = configured or os.environ.get("PYSPARK_PYTHON") or shutil.which("python3")
    problem = worker_python_problem(worker)
    if problem is not None:
        raise WorkerPythonError(problem)
    settings = spark_conf_settings(spark)
    enable_filter_pushdown(spark)
    try:
        from rlmm.spark.source import with_spark_conf
    except ImportError as e:
        raise ImportError(
            f"the kafka-archive Spark source needs pyspark: pip install 'rlmm[spark]' ({e})"
        ) from e
    spark.dataSource.register(with_spark_conf(settings))


def spark_conf_settings(spark: SparkSession) -> dict[str, str]:
    """The session's ``spark.rlmm.*`` entries; KafkaArchiveOptionError for a secret one
    (Spark sends its conf to every executor and shows it in its UI)."""
    from rlmm.secrets import is_secret

    try:
        found = spark.conf.getAll  # a property of RuntimeConfig (pyspark 4)
        everything = dict(found() if callable(found) else found)
    except Exception:  # a stand-in session, or a Spark without RuntimeConfig.getAll
        everything = {}
    settings = conf_settings(everything)
    for key in sorted(settings):
        if is_secret(key):
            raise KafkaArchiveOptionError(
                key,
                "is a secret, and Spark sends its conf to every executor and shows it in"
                " its UI: give the driver and the executors credentials through their"
                " environment (spark.executorEnv.AWS_ACCESS_KEY_ID, ...), a profile or an"
                " instance profile, or put the secret in the driver's config file",
            )
    return settings


FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def enable_filter_pushdown(spark: SparkSession) -> None:
    """Turn on Spark's filter pushdown to Python data sources in this session.

    kafka-archive's reader implements ``pushFilters``, and Spark (4.1, 4.2) refuses to
    plan a Python source that does while the conf is off (DATA_SOURCE_PUSHDOWN_DISABLED)
    rather than not calling it; the conf is off by default. It only matters to Python
    data sources that implement ``pushFilters``, and Spark still applies every filter
    such a source hands back."""
    current = str(spark.conf.get(FILTER_PUSHDOWN_CONF, "false")).strip().lower()
    if current != "true":
        log.info("kafka-archive: setting %s = true (needed for its filter pushdown)",
                 FILTER_PUSHDOWN_CONF)  # fmt: skip
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")


def worker_python_problem(worker: str | None) -> str | None:
    """Why Spark's worker interpreter ``worker`` cannot run kafka-archive, or None."""
    if worker is None:
        return (
            "Spark's Python workers run python3, and none is on PATH: set"
            f" PYSPARK_PYTHON={sys.executable} before the session starts"
        )
    if os.path.realpath(worker) == os.path.realpath(sys.executable):
        return None
    try:
        probe = subprocess.run(
            [worker, "-c", "import pyarrow, rlmm.spark"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Spark's Python workers would run {worker}, which cannot be started ({e})"
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return (
        f"Spark's Python workers would run {worker}, which cannot import rlmm and pyarrow"
        f" ({last}): set PYSPARK_PYTHON={sys.executable} (and PYSPARK_DRIVER_PYTHON) before"
        " the session starts, or install rlmm[spark] for that interpreter"
    )


__all__ = [
    "CONF_PREFIX",
    "FILTER_PUSHDOWN_CONF",
    "KafkaArchiveOptionError",
    "KafkaArchiveOptions",
    "WorkerPythonError",
    "enable_filter_pushdown",
    "parse_options",
    "register",
    "spark_conf_settings",
    "worker_python_problem",
]
