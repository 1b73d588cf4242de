"""`rlmm restore`'s argument parsing: partitions, timestamps, Kafka client properties;
bad values rejected by click before anything runs; the summary's batch counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.table import Table

from rlmm.cli import main
from rlmm.cli._restore_text import restore_lines
from rlmm.cli.restore import _partitions, _properties, _timestamp
from rlmm.restore import PartitionResult, RestorePlan, RestoreReport, RestoreSelection


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
    done = runner.invoke(main, ["restore", "--topic", "t", "--bootstrap-server", "x:1",
                                "--partitions-in-flight", "0"])  # fmt: skip
    assert done.exit_code == 2 and "--partitions-in-flight" in done.output


def test_the_summary_counts_batches_passed_through_and_reencoded() -> None:
    plan = RestorePlan(RestoreSelection("t"), "t", "AAAAAAAAAAAAAAAAAAAAAA", 2, (), "store", "x")
    report = RestoreReport(plan, 2, True, "rlmm-restore-t-0", "__rlmm_restore")
    report.results = [
        PartitionResult(0, 0, 10, 10, records=10, batches_passed_through=3),
        PartitionResult(1, 0, 10, 10, records=7, batches_reencoded=2,
                        reencoded=Counter({"range boundary": 1, "LogAppendTime": 1})),
    ]  # fmt: skip
    data = report.to_dict()
    assert (data["batches_passed_through"], data["batches_reencoded"]) == (3, 2)
    assert data["reencoded"] == {"LogAppendTime": 1, "range boundary": 1}
    assert data["partitions"][1]["reencoded"] == data["reencoded"]
    _, lines = restore_lines(report, lambda *columns, right=(): Table(*columns))
    assert (
        "batches: 3 archived batches sent as they are, 2 decoded and re-encoded"
        " (1 LogAppendTime, 1 range boundary)"
    ) in lines
