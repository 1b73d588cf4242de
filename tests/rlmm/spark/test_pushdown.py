"""Filter pushdown of ``format("kafka-archive")`` on local[2]: Spark's pushed filters
become bounds (``filter_bounds``), a filtered read returns exactly the rows Spark's
own filtering of the whole read gives, and it plans fewer slices."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    Not,
    StringStartsWith,
)

from rlmm.archive import RowBounds
from rlmm.spark import FILTER_PUSHDOWN_CONF
from rlmm.spark.source import filter_bounds, pushdown_is_scan_scoped
from tests.rlmm.archive.timeline_data import (
    BASE_TS,
    OUT_OF_ORDER,
    TOPIC,
    as_local_tiered_storage,
    write_timeline,
)
from tests.rlmm.spark.spark_data import UNPACKED, overrides, read

pytestmark = pytest.mark.spark


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def sql_ts(ms: int) -> str:
    return f"timestamp'{at(ms).isoformat()}'"


def test_filter_bounds_of_spark_s_filters() -> None:
    filters = [
        IsNotNull(("timestamp",)),
        GreaterThanOrEqual(("timestamp",), at(BASE_TS)),
        LessThan(("timestamp",), at(BASE_TS + 1000)),
        In(("partition",), (0, 2)),
        EqualTo(("topic",), "orders"),
        GreaterThan(("offset",), 9),
        EqualNullSafe(("offset",), 20),
        Not(EqualTo(("partition",), 0)),  # not understood: no bound
        StringStartsWith(("topic",), "ord"),
        EqualTo(("headers", "key"), "x"),  # a nested path: no bound
        EqualTo(("value",), b"x"),
    ]
    assert filter_bounds(filters) == RowBounds(
        topics=frozenset({"orders"}),
        partitions=frozenset({0, 2}),
        min_offset=20,
        max_offset=20,
        min_timestamp_ms=BASE_TS,
        max_timestamp_ms=BASE_TS + 999,
    )
    assert filter_bounds([]) == RowBounds()
    assert filter_bounds([EqualTo(("PARTITION",), 1)]) == RowBounds(partitions=frozenset({1}))


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    config, _ = write_timeline(tmp_path_factory.mktemp("spark-timeline"))
    # One input partition per slice, so the tests can count what planning pruned;
    # pruning on whatever the Spark version (each test loads a DataFrame per query).
    return {**overrides(config), "subscribe": TOPIC, **UNPACKED, "filterPushdown": "true"}


def collected(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (r.partition, r.offset, r.timestamp, bytes(r.key), bytes(r.value), r.timestampType)
        for r in df.collect()
    )


WINDOW = f"timestamp >= {sql_ts(BASE_TS + 1_200_000)} AND timestamp < {sql_ts(BASE_TS + 1_260_000)}"
CONDITIONS = [
    WINDOW,
    f"timestamp BETWEEN {sql_ts(OUT_OF_ORDER[1510])} AND {sql_ts(OUT_OF_ORDER[1510] + 999)}",
    f"timestamp > {sql_ts(BASE_TS + 1_800_000)}",
    "partition = 1",
    "partition IN (0) AND offset >= 250 AND offset < 420",
    "offset IN (5, 777, 1234)",
    f"topic = '{TOPIC}' AND offset = 42",
    "topic IN ('other')",
    "offset > 10 AND offset < 5",
    f"partition = 0 AND {WINDOW}",
    f"(partition = 0 OR offset < 3) AND {WINDOW}",  # the OR is not pushed, the window is
    "value IS NOT NULL AND offset <= 120",
]


def test_register_turns_on_python_filter_pushdown(registered: Any) -> None:
    assert registered.conf.get(FILTER_PUSHDOWN_CONF) == "true"


@pytest.mark.parametrize("condition", CONDITIONS)
def test_filtered_reads_equal_spark_filtering_the_whole_read(
    registered: Any, timeline: dict[str, str], condition: str
) -> None:
    whole = read(registered, **timeline)
    everything = whole.toArrow()
    # Spark's own filtering of rows it holds (a cached copy of the whole read: nothing
    # pushed to the source) against the same filter pushed into kafka-archive.
    local = registered.createDataFrame(everything)
    expected = collected(local.where(condition))
    pushed = read(registered, **timeline).where(condition)
    assert collected(pushed) == expected
    assert pushed.rdd.getNumPartitions() < whole.rdd.getNumPartitions()


def test_a_window_reads_few_partitions(registered: Any, timeline: dict[str, str]) -> None:
    whole = read(registered, **timeline)
    window = whole.where(WINDOW)
    # 19 archived segments per partition; the window is in segment 12, segment 7 holds
    # a record an hour ahead (its max timestamp) and 15 a straggler stamped at 300 s (its
    # smallest timestamp, in rlmm's manifest): 7, 12 and 15 of each partition.
    assert whole.rdd.getNumPartitions() == 38
    assert window.rdd.getNumPartitions() == 2 * 3
    assert window.count() == 2 * 60


def test_a_foreign_layout_learns_smallest_timestamps_then_skips(
    registered: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kafka's LocalTieredStorage records no smallest timestamp: the first read's
    executors learn them into rlmm's side index, and the next window skips the segments
    wholly after it, with rows equal to the unpruned read; the timestamp options give
    the same rows with the side index on or off."""
    tmp = tmp_path_factory.mktemp("spark-lts")
    config, _ = write_timeline(tmp / "rlmm-copy")
    remote = as_local_tiered_storage(config, tmp / "lts")
    options = {
        **overrides(config),
        **{f"rlmm.remote.{k}": v for k, v in remote.items() if k != "root"},
        "subscribe": TOPIC,
        **UNPACKED,
        "filterPushdown": "true",
    }
    learning = {**options, "rlmm.archive.side_index": str(tmp / "side-index")}
    unpruned = registered.createDataFrame(read(registered, **options).toArrow())
    expected = collected(unpruned.where(WINDOW))
    first = read(registered, **learning).where(WINDOW)
    assert first.rdd.getNumPartitions() == 2 * (1 + 7)  # unknown: read as before
    assert collected(first) == expected  # ... and its executors learned
    second = read(registered, **learning).where(WINDOW)
    assert second.rdd.getNumPartitions() == 2 * 3
    assert collected(second) == expected
    # startingTimestamp / endingTimestamp: offsets resolved the same either way.
    window = {
        "startingTimestamp": str(BASE_TS + 100_000),
        "endingTimestamp": str(BASE_TS + 160_000),
    }
    off = {**options, "rlmm.archive.side_index": "off", **window}
    by_options = collected(read(registered, **{**learning, **window}))
    assert by_options == collected(read(registered, **off))
    assert [(p, o) for p, o, *_ in by_options] == [
        (p, o) for p in range(2) for o in range(100, 160)
    ]


def test_pushdown_is_scan_scoped_from_spark_5() -> None:
    assert not pushdown_is_scan_scoped("4.1.0") and not pushdown_is_scan_scoped("4.3.1")
    assert pushdown_is_scan_scoped("5.0.0") and pushdown_is_scan_scoped("5.1.0.dev0")
    assert not pushdown_is_scan_scoped("unknown")


def test_auto_pushdown_stays_off_where_spark_reuses_a_pushed_down_read(
    registered: Any, timeline: dict[str, str]
) -> None:
    """Why ``filterPushdown`` is ``auto``: on this Spark, a DataFrame whose filtered
    query pruned the read gives its later unfiltered queries the same pruned read."""
    import pyspark

    auto = {k: v for k, v in timeline.items() if k != "filterPushdown"}
    total = read(registered, **auto).count()
    df = read(registered, **auto)
    assert df.where(WINDOW).count() == 2 * 60
    assert df.count() == total
    assert df.where("partition = 1").count() + df.where("partition = 0").count() == total
    forced = read(registered, **timeline)  # filterPushdown=true
    assert forced.where(WINDOW).count() == 2 * 60
    if pushdown_is_scan_scoped(pyspark.__version__):
        assert forced.count() == total
    else:  # Spark's reuse, which docs/spark.md warns about
        assert forced.count() < total
