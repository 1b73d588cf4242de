"""A broker that cannot be reached is one line when it goes and one when it is back,
never a warning per attempt (issue 46: a failover showed as repeated NodeNotReadyError
warnings and no sentence saying which broker went away). No broker needed: a fake
aiokafka client whose broker 1 is down until the cluster moves its partition."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition

from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from eventlog.kafka_client import BrokerReachability

TOPIC = "__remote_log_metadata"


class FakeCluster:
    def __init__(self) -> None:
        self.leaders = {0: 1, 1: 2}  # partition -> leader; broker 1 is the one to die

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self.leaders)

    def leader_for_partition(self, tp: TopicPartition) -> int:
        return self.leaders[tp.partition]

    def broker_metadata(self, node: int) -> Any:
        return SimpleNamespace(host=f"kafka-{node}.kafka", port=9092)


class FakeClient:
    """Broker 1 refuses every connection; after ``fail_over_after`` metadata updates
    the cluster has moved its partition to broker 2 (then broker 1 comes back)."""

    def __init__(self, fail_over_after: int) -> None:
        self.cluster = FakeCluster()
        self.down = {1}
        self.updates = 0
        self.fail_over_after = fail_over_after

    def add_topic(self, topic: str) -> None:
        pass

    async def force_metadata_update(self) -> None:
        self._metadata_update()

    def _metadata_update(self) -> None:
        self.updates += 1
        if self.updates >= self.fail_over_after:
            self.cluster.leaders[0] = 2

    async def send(self, node: int, request: Any) -> Any:
        if node in self.down:
            self._metadata_update()  # aiokafka asks for metadata after a failed connect
            raise kafka_errors.NodeNotReadyError(
                f"Attempt to send a request to node which is not ready (node id {node})."
            )
        ((topic, parts),) = request._topics
        if isinstance(request, OffsetRequest):
            return SimpleNamespace(topics=[(topic, [(p[0], 0, -1, 7) for p in parts])])
        return SimpleNamespace(topics=[(topic, [(p[0], 0, 7) for p in parts])])


def test_one_line_per_outage_and_one_when_the_broker_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    brokers = BrokerReachability(clock=lambda: now[0])
    error = kafka_errors.NodeNotReadyError("not ready (node id 1)")
    with caplog.at_level(logging.INFO, logger="eventlog.brokers"):
        for _ in range(5):
            brokers.unreachable(1, "kafka-1:9092", error)
        assert brokers.down() == {1: "kafka-1:9092"}
        brokers.reachable(2)  # never down: nothing to say
        now[0] = 142.0
        brokers.reachable(1)
        brokers.reachable(1)
        brokers.unreachable(1, "kafka-1:9092", kafka_errors.KafkaConnectionError("reset"))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            "WARNING",
            "broker 1 at kafka-1:9092 is unreachable (no connection could be opened): its"
            " requests are retried, and go to its partitions' new leaders once the cluster"
            " has elected them",
        ),
        ("INFO", "broker 1 at kafka-1:9092 answers again (unreachable for 42 s)"),
        (
            "WARNING",
            "broker 1 at kafka-1:9092 is unreachable (KafkaConnectionError: reset): its"
            " requests are retried, and go to its partitions' new leaders once the cluster"
            " has elected them",
        ),
    ]


async def test_end_offsets_over_a_dead_leader_name_it_once_not_per_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sidecar's metadata lag (end offsets of the metadata partitions) while broker
    1, a leader of one of them, is down: it used to warn at every attempt with
    aiokafka's NodeNotReadyError; now one line names broker 1 and its address, and the
    answer comes once the cluster has moved the partition."""
    settings = KafkaLogSettings(
        retry_backoff_ms=1, retry_backoff_max_ms=1, delivery_timeout_ms=10_000
    )
    log = KafkaEventLog("kafka-1.kafka:9092", 2, settings)
    client = FakeClient(fail_over_after=6)
    log._control = client  # type: ignore[assignment]
    log._started = True
    with caplog.at_level(logging.DEBUG):
        assert await log.end_offsets([0, 1]) == {0: 7, 1: 7}
        client.down.clear()
        client.cluster.leaders[0] = 1  # broker 1 is back and leads again
        assert await log.end_offsets([0, 1]) == {0: 7, 1: 7}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "broker 1 at kafka-1.kafka:9092 is unreachable (no connection could be opened): its"
        " requests are retried, and go to its partitions' new leaders once the cluster has"
        " elected them"
    ], warnings
    retried = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert retried and all(r.levelno == logging.DEBUG for r in retried)
    back = [r.getMessage() for r in caplog.records if r.name == "eventlog.brokers"]
    assert back[-1].startswith("broker 1 at kafka-1.kafka:9092 answers again"), back
    log._started = False
    log._control = None
    await log.close()
