"""The PySpark data source ``kafka-archive``: Spark's Kafka-source columns, read from the archive.

Job: a thin layer over ``rlmm.archive``. ``__init__`` (at ``load()``, on the driver)
parses and validates the options into a ``KafkaArchiveOptions`` and checks the
subscription against the archive; ``partitions()`` (on the driver) plans archive
slices and groups consecutive ones into input partitions; ``read()`` (on an executor)
fetches and decodes its group's slices, one after the other, into Arrow batches.
``pushFilters`` (Spark >= 4.1, on the driver, before ``partitions()``) turns the
query's comparisons on ``topic``, ``partition``, ``offset`` and ``timestamp`` into
``rlmm.archive.RowBounds``, which planning prunes with and readers filter rows with.

Invariants: pushed filters only ever remove rows the query drops: every filter is
handed back to Spark as not handled, so Spark still applies them all and a query's
result is the same with or without pushdown; an input partition carries everything
its reader needs (its slices: segment metadata, byte and offset range, aborted
transactions, remote storage options) and never a path to the driver's event log or
snapshots, so executors on other machines only need to reach remote storage; what
pyspark pickles for executors (input partitions, the reader, the data source) holds no
secret setting, so executors use their own credentials; a task that fails for what its
executor lacks says so in one line (``rlmm.spark.executor``); this module imports
neither pyarrow, boto3 nor the archive reader at import time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rlmm.secrets import is_secret
from rlmm.spark.errors import KafkaArchiveOptionError
from rlmm.spark.options import KafkaArchiveOptions, parse_options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from rlmm.archive import RowBounds, Slice

NAME = "kafka-archive"
# Rows per Arrow batch handed to the JVM. Each batch is a hand-off between the Python
# worker and the JVM: on a loaded machine 8Ki-row batches stalled (4x the wall time of
# 128Ki-row ones on local[2]), while 128Ki rows cost the worker ~0.1 us/record more
# CPU; 32Ki rows had 8Ki's CPU cost and most of 128Ki's wall time (bench/spark_read.py).
# Re-measured with the reader building 8Ki rows at a time (issue 20; one session,
# interleaved, 1.8M records): JVM + worker CPU 1.20 / 1.02 / 1.24 us per record and
# wall 2.18 / 1.90 / 2.23 s for 8Ki / 32Ki / 128Ki rows: 32Ki stays.
ARROW_BATCH_ROWS = 32 * 1024
log = logging.getLogger(__name__)


def kafka_struct(include_headers: bool) -> StructType:
    """Spark's Kafka-source schema (``KafkaRecordToRowConverter``), headers when asked."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class SlicePartition(InputPartition):
    """One Spark input partition: archive slices its task reads one after the other
    (a small picklable value)."""

    def __init__(self, pieces: Sequence[Slice]) -> None:
        super().__init__("; ".join(map(str, pieces)))
        self.slices = tuple(pieces)


# Spark's pushed filter classes -> the comparison each stands for. EqualNullSafe is
# EqualTo here: the bounded columns are never null (a null value is not understood).
_COMPARISONS: dict[type[Filter], str] = {
    EqualTo: "=",
    EqualNullSafe: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
    In: "in",
}


def filter_bounds(filters: list[Filter]) -> RowBounds:
    """The RowBounds of Spark's pushed filters (their AND); a filter on another column,
    or of another kind (NOT, IS NULL, LIKE), adds no bound."""
    from rlmm.archive import RowBounds

    bounds = RowBounds()
    for f in filters:
        op = _COMPARISONS.get(type(f))
        path: tuple[str, ...] = getattr(f, "attribute", ())
        if op is None or len(path) != 1:
            continue
        bounds = bounds.with_comparison(str(path[0]).lower(), op, getattr(f, "value", None))
    return bounds


_LEAKY_PUSHDOWN = (
    "this Spark keeps the read a pushdown planned on the loaded DataFrame, and later"
    " scans of the same DataFrame read it again (filterPushdown=true to prune anyway)"
)


def pushdown_is_scan_scoped(spark_version: str) -> bool:
    """Whether Spark ``spark_version`` keeps the read that filter pushdown planned to the
    scan it was planned for.

    Spark 4.1 to 4.3 do not: ``PythonScanBuilder.pushFilters`` stores the partitions and
    read function it got from the Python reader on the data source object that every
    scan of one loaded DataFrame shares (``PythonDataSourceV2.setReadInfo``), and a
    later scan that pushes no filter (``df.count()`` after ``df.where(...).count()``),
    or a second scan in the same query, plans with it: it reads only what the filtered
    scan needed, silently. Spark's main branch keeps it in the scan builder (the change
    that came with limit pushdown, for Spark 5.0)."""
    try:
        major = int(spark_version.split(".", 1)[0])
    except ValueError:
        return False
    return major >= 5


def pushdown_enabled(options: KafkaArchiveOptions) -> bool:
    """Whether pushed filters prune this read: ``filterPushdown`` true or false, or
    (``auto``) only where the running Spark scopes pushdown to one scan."""
    if options.filter_pushdown is not None:
        return options.filter_pushdown
    import pyspark

    return pushdown_is_scan_scoped(pyspark.__version__)


class KafkaArchiveReader(DataSourceReader):
    """Plans on the driver (``partitions``), fetches and decodes on executors (``read``).

    Every column is always read: pyspark 4.2's DataSourceReader has no column-pruning
    hook (only pushFilters, partitions, read), Spark's PythonScanBuilder implements
    SupportsPushDownFilters alone (not SupportsPushDownRequiredColumns), and the worker
    refuses a batch whose Arrow schema is not exactly the declared one
    (DATA_SOURCE_RETURN_SCHEMA_MISMATCH: no dictionary, run-end or large types either).
    """

    def __init__(
        self, options: KafkaArchiveOptions, secrets: Mapping[str, Any] | None = None
    ) -> None:
        self.options = options  # without secrets: this object travels to executors
        self.where: RowBounds | None = None
        # Secret settings given as options (used to plan, on the driver): never pickled.
        self._secrets = dict(secrets or {})

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_secrets"] = {}
        return state

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Keep the bounds of ``filters`` for planning, when pushdown is on for this
        read (``filterPushdown``); hand every filter back to Spark (not handled), so
        Spark applies them all: pruning never drops a row the query keeps."""
        bounds = filter_bounds(filters)
        if pushdown_enabled(self.options):
            self.where = bounds
            log.info("kafka-archive: pushed filters %s -> %s", filters, bounds)
        else:
            log.info(
                "kafka-archive: not pruning by %s (filterPushdown is off: %s)",
                bounds,
                "set false" if self.options.filter_pushdown is False else _LEAKY_PUSHDOWN,
            )
        return filters

    def partitions(self) -> list[InputPartition]:
        from rlmm.spark.planning import plan_groups

        groups = plan_groups(self.options.with_secrets(self._secrets), self.where)
        log.info(
            "kafka-archive: %d slices in %d input partitions",
            sum(map(len, groups)),
            len(groups),
        )
        return [SlicePartition(group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark's own stand-in partition (nothing planned) has no slices.
        pieces: tuple[Slice, ...] = getattr(partition, "slices", ())
        if not pieces:
            return iter(())
        return _read_pieces(pieces)


def _read_pieces(pieces: Sequence[Slice]) -> Iterator[pa.RecordBatch]:
    """The slices' batches, one slice after the other; a failure caused by what this
    executor lacks (credentials, endpoint, local root) is one line naming the setting."""
    from rlmm.archive.reader import read_slice
    from rlmm.spark.executor import executor_setting_error, missing_local_root

    options = pieces[0].remote_options  # one read: every slice has the same
    missing = missing_local_root(options)
    if missing is not None:
        raise missing
    try:
        for piece in pieces:
            yield from read_slice(piece, batch_rows=ARROW_BATCH_ROWS)
    except Exception as e:
        lacking = executor_setting_error(e, options)
        if lacking is None:
            raise
        raise lacking from e


class KafkaArchiveDataSource(DataSource):
    """``spark.read.format("kafka-archive")``: register with ``rlmm.spark.register(spark)``."""

    # The session's spark.rlmm.* Spark conf entries: ``register`` registers a subclass
    # that sets them (a data source runs in a Python worker without a SparkSession).
    spark_conf: dict[str, str] = {}

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(dict(options), self.spark_conf)
        if self.parsed.ignored:
            log.info("kafka-archive: ignoring live-consumer options %s", self.parsed.ignored)
        from rlmm.spark.planning import check_subscription

        check_subscription(self.parsed)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return kafka_struct(self.parsed.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        expected = kafka_struct(self.parsed.include_headers)
        if schema != expected:  # a user-given .schema(...): the columns are fixed
            raise KafkaArchiveOptionError(
                "schema",
                f"kafka-archive has the fixed schema {expected.simpleString()}"
                f" (includeHeaders picks the headers column), got {schema.simpleString()}",
            )
        # pyspark pickles this data source with the reader into the read function it
        # ships to every executor; reader() is called in the planning worker just
        # before that (never before this object's earlier trip to the JVM, which needs
        # the secrets to plan): from here on neither carries a secret setting, the
        # reader keeps them for planning in an attribute that is not pickled.
        public, secrets = self.parsed.split_secrets()
        self.parsed = public
        self.options = {k: v for k, v in dict(self.options).items() if not is_secret(str(k))}
        return KafkaArchiveReader(public, secrets)


def with_spark_conf(conf: Mapping[str, str]) -> type[KafkaArchiveDataSource]:
    """KafkaArchiveDataSource reading the ``spark.rlmm.*`` entries ``conf`` as settings
    under its options (pickled by value with the class: keep secrets out of ``conf``)."""
    if not conf:
        return KafkaArchiveDataSource
    return type(
        "KafkaArchiveDataSource",
        (KafkaArchiveDataSource,),
        {"spark_conf": dict(conf), "__module__": __name__},
    )


__all__ = [
    "NAME",
    "KafkaArchiveDataSource",
    "KafkaArchiveReader",
    "SlicePartition",
    "filter_bounds",
    "kafka_struct",
    "pushdown_enabled",
    "pushdown_is_scan_scoped",
    "with_spark_conf",
]
