"""`rlmm restore`'s argument parsing: partitions, timestamps, Kafka client properties;
bad values rejected by click before anything runs; the summary's batch counts; several
topics (one selection and target each, ``--target-topic`` refused, one JSON document)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.table import Table

from rlmm.cli import main
from rlmm.cli._restore_text import restore_lines
from rlmm.cli.output import JsonOutput
from rlmm.cli.restore import _partitions, _properties, _timestamp
from rlmm.restore import (
    PartitionResult,
    RestoreInputError,
    RestorePlan,
    RestoreReport,
    RestoreSelection,
    select_topics,
)


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


def test_several_topics_share_the_selection_each_with_its_own_target() -> None:
    common = {"partitions": (0, 2), "from_offset": 5, "partitioner": "murmur2"}
    one, two = select_topics(["a", "b"], target_prefix="restored.", **common)
    assert (one.topic, one.target, two.topic, two.target) == ("a", "restored.a", "b", "restored.b")
    assert one.partitions == two.partitions == (0, 2) and one.from_offset == two.from_offset == 5
    assert [s.target for s in select_topics(["a", "b"])] == ["a", "b"]
    assert [s.target for s in select_topics(["a"], target_topic="x")] == ["x"]
    for topics, kwargs, message in [
        (["a", "b", "a"], {}, "topic 'a' is named twice"),
        (["a"], {"target_topic": "x", "target_prefix": "p."}, "not both"),
        (["a", "b"], {"target_topic": "x"}, "--target-topic names the target of one topic"),
        (["a"], {"target_prefix": "bad/"}, "not a legal Kafka topic name"),
    ]:
        with pytest.raises(RestoreInputError, match=message):
            select_topics(topics, **kwargs)


def test_target_topic_with_several_topics_is_one_line_exit_2() -> None:
    args = ["--topic", "a", "--topic", "b", "--bootstrap-server", "x:1", "--target-topic", "x"]
    done = CliRunner().invoke(main, ["restore", *args])
    assert done.exit_code == 2
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "--target-topic names the target of one topic, not of 2" in lines[0]


def test_several_reports_are_one_json_document_and_one_block_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reports = []
    for topic in ("a", "b"):
        plan = RestorePlan(RestoreSelection(topic), topic, "AAAAAAAAAAAAAAAAAAAAAA", 1, (),
                           "store", "x")  # fmt: skip
        reports.append(
            RestoreReport(plan, 1, False, f"rlmm-restore-{topic}-0", "__rlmm_restore", dry_run=True)
        )
    JsonOutput().restores(reports[:1])
    assert json.loads(capsys.readouterr().out) == reports[0].to_dict()
    JsonOutput().restores(reports)
    assert json.loads(capsys.readouterr().out) == {"topics": [r.to_dict() for r in reports]}


def test_a_one_partition_plan_says_partition_in_the_singular() -> None:
    plan = RestorePlan(RestoreSelection("t"), "t", "AAAAAAAAAAAAAAAAAAAAAA", 1, (), "store", "x")
    report = RestoreReport(plan, 1, False, "rlmm-restore-t-0", "__rlmm_restore", dry_run=True)
    _, lines = restore_lines(report, lambda *columns, right=(): Table(*columns))
    assert lines[0].startswith("source: t (topic id AAAAAAAAAAAAAAAAAAAAAA, 1 partition;"), lines
    assert lines[1].startswith("target: t (1 partition, partitioner identity"), lines
