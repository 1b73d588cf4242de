"""The suite's xdist groups (tests/fixtures/workers.py): a test reaching the session's
Apache Kafka broker, directly or through an "apache" parameter, is in its group."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.fixtures.workers import group_of


def item(fixtures: tuple[str, ...], **params: str) -> Any:
    return SimpleNamespace(fixturenames=fixtures, callspec=SimpleNamespace(params=params))


def test_groups() -> None:
    assert group_of(item(("tmp_path", "apache_kafka"))) == "apache-kafka-broker"
    assert group_of(item(("apache_kafka_cluster", "apache_kafka"))) == "apache-kafka-cluster"
    # fixtures that ask for the broker at run time, by parameter
    assert group_of(item(("kafka_bootstrap",), kafka_flavor="apache")) == "apache-kafka-broker"
    assert group_of(item(("make_log",), backend="kafka-apache")) == "apache-kafka-broker"
    assert group_of(item(("kafka_bootstrap",), kafka_flavor="tansu")) is None
    assert group_of(item(("make_log",), backend="file")) is None
    assert group_of(SimpleNamespace(fixturenames=("tmp_path",))) is None
