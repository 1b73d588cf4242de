"""``spark.read.format("kafka-archive")`` on local[2], record by record against what was
written: every codec, both isolation levels, offset and timestamp ranges, slices
inside segments, leader changes, S3 through moto's server, real broker segments."""

from __future__ import annotations

import asyncio
import json
import pickle
import re
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from remote.segments import available_codecs
from rlmm.archive import open_metadata_view
from rlmm.config import load_config
from rlmm.spark import parse_options
from rlmm.spark.planning import plan
from tests.remote.segments._data import TIMEINDEX_TEST, TOPIC_A, TOPIC_B
from tests.rlmm.archive.archive_data import (
    archived,
    expected_rows,
    make_config,
    offload,
    write_history,
)
from tests.rlmm.archive.test_real_segments import as_partition_dir, kafka_python_rows
from tests.rlmm.spark.spark_data import (
    UNPACKED,
    copy_segments,
    overrides,
    read,
    spark_rows,
    write_leader_change,
)

pytestmark = pytest.mark.spark

CODECS = available_codecs()
KAFKA_COLUMNS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]


def test_every_codec_record_by_record_with_spark_s_kafka_schema(
    registered: Any, history: Any
) -> None:
    toml, written = history
    df = read(registered, config=str(toml), subscribePattern="h-.*", includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        *KAFKA_COLUMNS,
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    got = spark_rows(df)
    assert sorted(got) == sorted((f"h-{codec}", 0) for codec in CODECS)
    for codec in CODECS:
        expected = written[codec]  # read_uncommitted: aborted records too
        assert got[(f"h-{codec}", 0)] == expected_rows(expected), codec
        assert any(e.aborted for e in expected) and any(e.key is None for e in expected)
    # Without includeHeaders: exactly Spark's Kafka columns.
    plain = read(registered, config=str(toml), subscribe="h-none")
    assert [(f.name, f.dataType.simpleString()) for f in plain.schema.fields] == KAFKA_COLUMNS
    # One slice per archived segment; small slices share an input partition (here all
    # of them), unless opening one is said to cost a whole partition's bytes.
    config = make_config(toml.parent / "rlmm")
    with open_metadata_view(config) as view:
        segments = len(view.lineage(view.find("h-none", 0)))  # type: ignore[arg-type]
    assert plain.rdd.getNumPartitions() == 1
    one_each = read(registered, config=str(toml), subscribe="h-none", **UNPACKED)
    assert one_each.rdd.getNumPartitions() == segments > 4
    assert spark_rows(one_each) == spark_rows(plain)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_both_isolation_levels(registered: Any, history: Any, codec: str) -> None:
    toml, written = history
    topic = f"h-{codec}"
    committed = [e for e in written[codec] if not e.aborted]
    df = read(registered, config=str(toml), subscribe=topic, isolationLevel="read_committed")
    assert spark_rows(df)[(topic, 0)] == expected_rows(committed, headers=False)
    # Spark's Kafka-source spelling (a consumer property) means the same.
    df = read(
        registered, config=str(toml), subscribe=topic, **{"kafka.isolation.level": "read_committed"}
    )
    assert spark_rows(df)[(topic, 0)] == expected_rows(committed, headers=False)
    df = read(registered, config=str(toml), subscribe=topic, isolationLevel="read_uncommitted")
    assert spark_rows(df)[(topic, 0)] == expected_rows(written[codec], headers=False)


def test_offset_ranges(registered: Any, history: Any) -> None:
    toml, written = history
    expected = written["gzip"]
    start, end = 17, 233
    df = read(
        registered,
        config=str(toml),
        assign=json.dumps({"h-gzip": [0]}),
        startingOffsets=json.dumps({"h-gzip": {"0": start}}),
        endingOffsets=json.dumps({"h-gzip": {"0": end}}),
    )
    wanted = [e for e in expected if start <= e.offset < end]
    assert spark_rows(df)[("h-gzip", 0)] == expected_rows(wanted, headers=False)
    # -2 / -1 are earliest / latest, as in Spark's JSON.
    df = read(
        registered,
        config=str(toml),
        subscribe="h-gzip",
        startingOffsets=json.dumps({"h-gzip": {"0": -2}}),
        endingOffsets=json.dumps({"h-gzip": {"0": -1}}),
    )
    assert spark_rows(df)[("h-gzip", 0)] == expected_rows(expected, headers=False)


def test_timestamp_ranges(registered: Any, history: Any) -> None:
    toml, written = history
    expected = written["none"]
    lo_ts, hi_ts = expected[30].timestamp, expected[300].timestamp
    first = next(e.offset for e in expected if e.timestamp >= lo_ts)
    last = next(e.offset for e in expected if e.timestamp >= hi_ts)
    wanted = expected_rows([e for e in expected if first <= e.offset < last], headers=False)
    df = read(
        registered,
        config=str(toml),
        subscribe="h-none",
        startingTimestamp=str(lo_ts),
        endingTimestamp=str(hi_ts),
    )
    assert spark_rows(df)[("h-none", 0)] == wanted
    df = read(
        registered,
        config=str(toml),
        subscribe="h-none",
        startingOffsetsByTimestamp=json.dumps({"h-none": {"0": lo_ts}}),
        endingOffsetsByTimestamp=json.dumps({"h-none": {"0": hi_ts}}),
        startingOffsets="earliest",  # Spark: *OffsetsByTimestamp wins over *Offsets
    )
    assert spark_rows(df)[("h-none", 0)] == wanted


def test_slice_boundaries_inside_segments(registered: Any, history: Any) -> None:
    """maxRecordsPerPartition and minPartitions cut segments into several input
    partitions (inside transactions too); together they read each record once."""
    toml, written = history
    committed = [e for e in written["none"] if not e.aborted]
    whole = read(
        registered, config=str(toml), subscribe="h-none", **UNPACKED
    ).rdd.getNumPartitions()
    df = read(
        registered,
        config=str(toml),
        subscribe="h-none",
        includeHeaders="true",
        maxRecordsPerPartition="37",
        isolationLevel="read_committed",
    )
    assert df.rdd.getNumPartitions() > 2 * whole
    assert spark_rows(df)[("h-none", 0)] == expected_rows(committed)
    df = read(registered, config=str(toml), subscribe="h-none", minPartitions=str(4 * whole))
    assert df.rdd.getNumPartitions() >= 4 * whole
    assert spark_rows(df)[("h-none", 0)] == expected_rows(written["none"], headers=False)


def test_leader_changes_and_superseded_segments(registered: Any, tmp_path: Path) -> None:
    config, expected_keys = write_leader_change(tmp_path)
    df = read(registered, subscribe="t", **overrides(config))
    got = spark_rows(df)[("t", 0)]
    assert [r[0] for r in got] == list(range(len(expected_keys)))
    assert [r[1] for r in got] == expected_keys


def test_fail_on_data_loss(registered: Any, tmp_path: Path) -> None:
    """A segment never copied: the read fails naming the missing offsets, or with
    failOnDataLoss=false reads around them."""
    pdir, expected = write_history(tmp_path / "logs", "g", 0)
    config = make_config(tmp_path / "rlmm")
    rolled = pdir.segments()[:-1]
    missing = rolled[2]
    copy_segments(config, pdir.topic_id_partition(), [s for s in rolled if s is not missing])
    gap = (missing.base_offset, rolled[3].base_offset)
    with pytest.raises(Exception, match=rf"offsets \[{gap[0]}, {gap[1]}\) are missing"):
        read(registered, subscribe="g", **overrides(config)).count()
    df = read(registered, subscribe="g", failOnDataLoss="false", **overrides(config))
    kept = [e for e in archived(pdir, expected) if not gap[0] <= e.offset < gap[1]]
    assert spark_rows(df)[("g", 0)] == expected_rows(kept, headers=False)


@pytest.mark.kafka
def test_a_kafka_event_log(registered: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """The metadata in a Kafka topic (``__remote_log_metadata``'s format): the driver
    replays it; executors still only read remote storage."""
    topic = f"rlmm-spark-{uuid.uuid4().hex[:8]}"
    toml = tmp_path / "kafka.toml"
    toml.write_text(
        f'data_dir = "{tmp_path / "rlmm"}"\n[snapshot]\nenabled = false\n'
        f'[eventlog]\ntype = "kafka"\nbootstrap_servers = "{kafka_bootstrap}"\n'
        f'topic = "{topic}"\npartitions = 4\nreplication_factor = 1\n'
    )
    config = load_config(toml, env={})
    pdir, expected = write_history(tmp_path / "logs", "kt", 0, "snappy")
    asyncio.run(offload(config, [pdir]))
    df = read(registered, config=str(toml), subscribe="kt", isolationLevel="read_committed")
    committed = [e for e in archived(pdir, expected) if not e.aborted]
    assert spark_rows(df)[("kt", 0)] == expected_rows(committed, headers=False)


@pytest.mark.s3
def test_s3_through_the_moto_server(registered: Any, s3_endpoint: str, tmp_path: Path) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="spark-archive")
    config = make_config(
        tmp_path / "rlmm",
        **{
            "remote.type": "s3",
            "remote.bucket": "spark-archive",
            "remote.endpoint_url": s3_endpoint,
        },
    )
    pdir, expected = write_history(tmp_path / "logs", "s3t", 0, "zstd")
    asyncio.run(offload(config, [pdir]))
    expected = archived(pdir, expected)
    df = read(
        registered,
        subscribe="s3t",
        includeHeaders="true",
        maxRecordsPerPartition="50",  # ranged GETs inside segments
        **overrides(config),
    )
    assert df.rdd.getNumPartitions() > len(pdir.segments())
    assert spark_rows(df)[("s3t", 0)] == expected_rows(expected)
    # What an executor gets names the bucket, never the driver's disk.
    from rlmm.spark.source import SlicePartition

    slices = plan(parse_options({"subscribe": "s3t", **overrides(config)}))
    blob = pickle.dumps(SlicePartition(slices))
    assert b"spark-archive" in blob and str(tmp_path).encode() not in blob


def test_real_broker_segments_match_kafka_python(registered: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    dirs = [
        as_partition_dir(TIMEINDEX_TEST, logs / "timeindex_test-0"),
        as_partition_dir(TOPIC_A, logs / "test_topic_a-0"),
        as_partition_dir(TOPIC_B, logs / "test_topic_b-0"),
    ]
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, dirs, skip_active=False))
    df = read(
        registered,
        subscribe=",".join(p.topic for p in dirs),
        includeHeaders="true",
        maxRecordsPerPartition="5000",
        **overrides(config),
    )
    got = spark_rows(df)
    for pdir in dirs:
        assert [r[:5] for r in got[(pdir.topic, 0)]] == kafka_python_rows(pdir), pdir.topic
    assert len(got[("timeindex_test", 0)]) == 15363


@pytest.mark.parametrize(
    ("options", "option", "match"),
    [
        ({"subscribe": "nope"}, "subscribe", "topic 'nope' is not in the archive"),
        ({"assign": '{"h-none": [0, 3]}'}, "assign", r"partitions \[3\] of topic 'h-none'"),
        ({"subscribe": "h-none", "assign": '{"h-none": [0]}'}, "assign", "exactly one of"),
        (
            {"subscribe": "h-none", "startingOffsets": '{"h-none": {"0": 1'},
            "startingOffsets",
            "JSON",
        ),
        (
            {"subscribePattern": "h-.*", "endingOffsets": '{"h-x": {"0": 9}}'},
            "endingOffsets",
            "h-x-0",
        ),
        ({"subscribe": "h-none", "config": "/nonexistent/rlmm.toml"}, "config", "does not exist"),
        ({"subscribe": "h-none", "rlmm.manager.typo": "1"}, "rlmm.manager.typo", "unknown setting"),
        # Spark hands the source its option names lower-cased
        (
            {"subscribe": "h-none", "startingOffset": "earliest"},
            "startingoffset",
            r"did you mean startingOffsets\?",
        ),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(
    registered: Any, history: Any, options: dict[str, str], option: str, match: str
) -> None:
    from pyspark.errors import AnalysisException

    toml, _ = history
    with pytest.raises(AnalysisException) as caught:
        read(registered, **{"config": str(toml), **options})
    message = str(caught.value)
    assert f"kafka-archive option '{option}'" in message
    assert re.search(match, message), message
    assert "docs/" not in message, message  # pip users have no such file


def test_a_user_schema_other_than_kafka_s_is_refused(registered: Any, history: Any) -> None:
    toml, _ = history
    df = registered.read.format("kafka-archive").schema("value string")
    df = df.option("config", str(toml)).option("subscribe", "h-none").load()
    with pytest.raises(Exception, match="kafka-archive option 'schema'"):
        df.count()
