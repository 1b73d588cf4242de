"""Parsing kafka-archive's options (no Spark needed): Spark's Kafka-source names and
meanings, ours, precedence, and an error naming the option for each bad one."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rlmm.spark import KafkaArchiveOptionError, parse_options
from rlmm.spark.planning import rlmm_config


@pytest.fixture
def toml(tmp_path: Path) -> str:
    path = tmp_path / "rlmm.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    return str(path)


def test_defaults_are_spark_s(toml: str) -> None:
    parsed = parse_options({"config": toml, "subscribe": "a, b"})
    assert parsed.topics == ("a", "b")
    assert parsed.starting_offsets is None and parsed.ending_offsets is None  # earliest..latest
    assert parsed.fail_on_data_loss is True
    assert parsed.include_headers is False
    assert parsed.isolation_level == "read_uncommitted"
    assert parsed.min_partitions is None and parsed.max_records_per_partition is None
    assert parsed.filter_pushdown is None  # auto
    assert parse_options({"config": toml, "subscribe": "a", "filterpushdown": "Auto"}) == (
        parse_options({"config": toml, "subscribe": "a"})
    )
    assert pickle.loads(pickle.dumps(parsed)) == parsed


def test_from_store_is_a_boolean_off_by_default(toml: str) -> None:
    base = {"config": toml, "subscribe": "a"}
    assert parse_options(base).from_store is False
    assert parse_options({**base, "fromstore": "TRUE"}).from_store is True  # as Spark passes it
    with pytest.raises(KafkaArchiveOptionError, match="option 'fromStore': must be true or false"):
        parse_options({**base, "fromStore": "yes"})


def test_every_option(toml: str) -> None:
    parsed = parse_options(
        {
            "config": toml,
            "assign": '{"orders": [1, 0], "audit": [2]}',
            "startingoffsets": '{"orders": {"0": 23, "1": -2}}',
            "endingoffsets": '{"orders": {"0": 50, "1": -1}, "audit": {"2": 7}}',
            "includeheaders": "TRUE",
            "failondataloss": "false",
            "minpartitions": "8",
            "maxrecordsperpartition": "1000",
            "isolationlevel": "read_committed",
            "maxbytesperpartition": "1048576",
            "opencostinbytes": "0",
            "filterpushdown": "TRUE",
            "kafka.bootstrap.servers": "broker:9092",  # accepted, ignored
            "maxoffsetspertrigger": "10",
        }
    )
    assert dict(parsed.assign or {}) == {"orders": (0, 1), "audit": (2,)}
    assert parsed.starting_offsets == {("orders", 0): 23, ("orders", 1): -2}
    assert parsed.ending_offsets == {("orders", 0): 50, ("orders", 1): -1, ("audit", 2): 7}
    assert parsed.include_headers and not parsed.fail_on_data_loss
    assert (parsed.min_partitions, parsed.max_records_per_partition) == (8, 1000)
    assert parsed.isolation_level == "read_committed"
    assert parsed.max_bytes_per_partition == 1 << 20
    assert parsed.open_cost_in_bytes == 0 and parsed.filter_pushdown is True
    assert parsed.ignored == ("kafka.bootstrap.servers", "maxoffsetspertrigger")


def test_timestamp_precedence_is_spark_s(toml: str) -> None:
    base = {"config": toml, "subscribe": "t", "startingOffsets": '{"t": {"0": 5}}'}
    by_ts = {**base, "startingOffsetsByTimestamp": '{"t": {"0": 1000}}'}
    parsed = parse_options(by_ts)
    assert parsed.starting_timestamp_ms == {("t", 0): 1000} and parsed.starting_offsets is None
    parsed = parse_options({**by_ts, "startingTimestamp": "2000", "endingTimestamp": "3000"})
    assert (parsed.starting_timestamp_ms, parsed.ending_timestamp_ms) == (2000, 3000)
    parsed = parse_options({**base, "startingOffsetsByTimestampStrategy": "latest"})
    assert parsed.starting_timestamp_strategy == "latest"


def test_inline_overrides_without_a_file(tmp_path: Path) -> None:
    parsed = parse_options(
        {"subscribe": "t", "rlmm.data_dir": str(tmp_path), "rlmm.eventlog.partitions": "4"}
    )
    config = rlmm_config(parsed)
    assert config.data_dir == tmp_path and config.eventlog["partitions"] == 4
    bad = parse_options({"subscribe": "t", "rlmm.manager.typo": "1"})
    with pytest.raises(KafkaArchiveOptionError, match=r"option 'rlmm.manager.typo'"):
        rlmm_config(bad)


@pytest.mark.parametrize(
    ("options", "option", "match"),
    [
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "assign", "exactly one of"),
        ({}, "subscribe", "exactly one of"),
        ({"subscribe": " , "}, "subscribe", "names no topic"),
        ({"subscribePattern": "a("}, "subscribePattern", "not a valid regex"),
        ({"assign": "{oops"}, "assign", "not valid JSON"),
        ({"assign": '{"a": 0}'}, "assign", "list of partitions"),
        ({"assign": '{"a": ["x"]}'}, "assign", "not a partition number"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1'}, "startingOffsets", "JSON"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets", "latest"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets", "earliest"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, "startingOffsets", "-1"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets", "-2"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": "5"}}'}, "endingOffsets", "integer"),
        ({"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "startingOffsets", "b-0"),
        ({"assign": '{"a": [0]}', "endingOffsets": '{"a": {"1": 3}}'}, "endingOffsets", "a-1"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "startingTimestamp", "in ms"),
        ({"subscribe": "a", "includeHeaders": "yes"}, "includeHeaders", "true or false"),
        ({"subscribe": "a", "failOnDataLoss": "1"}, "failOnDataLoss", "true or false"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions", "positive"),
        ({"subscribe": "a", "maxRecordsPerPartition": "x"}, "maxRecordsPerPartition", "positive"),
        ({"subscribe": "a", "openCostInBytes": "-1"}, "openCostInBytes", "non-negative"),
        ({"subscribe": "a", "filterPushdown": "yes"}, "filterPushdown", "auto, true or false"),
        ({"subscribe": "a", "isolationLevel": "serializable"}, "isolationLevel", "read_committed"),
        ({"subscribe": "a", "kafka.isolation.level": "x"}, "kafka.isolation.level", "read_"),
        ({"subscribe": "a", "subscription": "a"}, "subscription", "not an option"),
    ],
)
def test_bad_options_name_the_option(
    toml: str, options: dict[str, str], option: str, match: str
) -> None:
    with pytest.raises(KafkaArchiveOptionError, match=match) as caught:
        parse_options({"config": toml, **{k.lower(): v for k, v in options.items()}})
    assert caught.value.option.lower() == option.lower()
    assert f"option '{caught.value.option}'" in str(caught.value)


def test_a_missing_config_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(KafkaArchiveOptionError, match=r"option 'config'.*nope.toml"):
        parse_options({"config": str(missing), "subscribe": "t"})
    with pytest.raises(KafkaArchiveOptionError, match="option 'config': is required"):
        parse_options({"subscribe": "t"})


def test_nothing_heavy_at_import() -> None:
    """``import rlmm.spark`` needs no pyspark; the source module loads pyspark's base
    classes only: the archive reader, pyarrow and boto3 load when a read needs them."""
    code = (
        "import sys, rlmm.spark\n"
        "assert 'pyspark' not in sys.modules, 'pyspark'\n"
        "import rlmm.spark.source\n"
        "heavy = [m for m in ('pyarrow', 'boto3', 'rlmm.archive') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("given", ["startingOffset", "startingoffset", "STARTINGOFFSET"])
def test_an_option_typo_keeps_its_spelling_and_names_the_close_match(toml: str, given: str) -> None:
    """As the caller spelled it (Spark passes names lower-cased), with the option it is
    close to, and no path of this repository (pip users do not have one)."""
    with pytest.raises(KafkaArchiveOptionError) as caught:
        parse_options({"config": toml, "subscribe": "a", given: "earliest"})
    assert caught.value.option == given
    message = str(caught.value)
    assert message.startswith(f"kafka-archive option '{given}': ")
    assert message.endswith("did you mean startingOffsets?"), message
    assert "docs/" not in message and ".md" not in message


def test_an_option_far_from_any_lists_the_options(toml: str) -> None:
    with pytest.raises(KafkaArchiveOptionError) as caught:
        parse_options({"config": toml, "subscribe": "a", "bootstrapServers": "k:9092"})
    message = str(caught.value)
    assert caught.value.option == "bootstrapServers" and "did you mean" not in message
    for name in ("subscribe", "startingOffsets", "maxBytesPerPartition", "rlmm.<section>.<key>"):
        assert name in message
    assert "docs/" not in message and ".md" not in message
