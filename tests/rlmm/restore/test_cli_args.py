"""`rlmm restore`'s argument parsing: partitions, timestamps, Kafka client properties;
and bad values rejected by click before anything runs."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rlmm.cli import main
from rlmm.cli.restore import _partitions, _properties, _timestamp


def test_partitions_and_timestamps() -> None:
    assert _partitions("0,1, 3") == (0, 1, 3)
    assert _partitions(None) == ()
    with pytest.raises(click.BadParameter):
        _partitions("a,b")
    assert _timestamp("1700000000000", "--from-timestamp") == 1_700_000_000_000
    assert _timestamp("2023-11-14T22:13:20", "--from-timestamp") == 1_700_000_000_000
    assert _timestamp("2023-11-14T23:13:20+01:00", "--x") == 1_700_000_000_000
    with pytest.raises(click.BadParameter):
        _timestamp("yesterday", "--from-timestamp")


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text(
        "# Kafka's tools' format\nsecurity.protocol=SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n! a comment\n\n"
    )
    assert _properties(f, ("sasl.mechanism=PLAIN", "ssl.check.hostname=false")) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "ssl.check.hostname": "false",
    }
    with pytest.raises(click.BadParameter):
        _properties(None, ("novalue",))


def test_bad_values_are_usage_errors() -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["restore", "--topic", "t", "--bootstrap-server", "x:1",
                                "--partitioner", "random"])  # fmt: skip
    assert done.exit_code == 2 and "random" in done.output
    done = runner.invoke(
        main, ["restore", "--topic", "t", "--bootstrap-server", "x:1", "--target-topic", "a/b"]
    )
    assert done.exit_code == 2 and "not a legal Kafka topic name" in done.output
