"""Kafka control-plane helpers of KafkaEventLog: error translation, topic bootstrap, end offsets.

Job: the one place where aiokafka errors become eventlog errors (keeping the
original as ``__cause__``), where the metadata topic is created or verified, and
where log end offsets are read.

Invariant: end offsets come from a Fetch response's high watermark, never from
ListOffsets(latest) alone (Tansu answers that wrongly); a topic with another
partition count than configured is refused, never used.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition

from eventlog.errors import (
    EventLogAuthError,
    EventLogAuthorizationError,
    EventLogConfigError,
    EventLogError,
    EventLogRecordTooLargeError,
    EventLogTransportError,
)
from eventlog.kafka_client import UNREACHABLE, BrokerReachability, address_of

log = logging.getLogger(__name__)

_AUTHENTICATION = (
    kafka_errors.AuthenticationFailedError,
    kafka_errors.AuthenticationMethodNotSupported,
    kafka_errors.SaslAuthenticationFailed,
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
)
_AUTHORIZATION = (
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.GroupAuthorizationFailedError,
)


@dataclass(frozen=True)
class Access:
    """What a request needs from the broker's ACLs: who asks, for what, on which topic."""

    principal: str
    operation: str  # Kafka's ACL operation: READ, WRITE, DESCRIBE, CREATE
    topic: str


_TOO_LARGE = (
    kafka_errors.RecordTooLargeError,
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordListTooLargeError,
)


def translate_error(exc: BaseException, what: str, access: Access | None = None) -> EventLogError:
    """The eventlog error for an aiokafka (or socket) failure while doing ``what``.

    ``what`` names the operation, topic and partition, e.g. "append to t-3"; ``access``
    what the request needed, so a denial names the principal, operation and topic.
    Timeouts count as retriable (as in Kafka's Java client), unlike aiokafka's flag.
    """
    if isinstance(exc, EventLogError):
        return exc
    name = type(exc).__name__
    named = _named(exc)
    if isinstance(exc, _TOO_LARGE):
        return EventLogRecordTooLargeError(f"{what}: record too large for the broker ({named})")
    if isinstance(exc, _AUTHORIZATION) and access is not None:
        return EventLogAuthorizationError(
            access.principal, access.operation, access.topic, f"{what}: Kafka answered {name}"
        )
    if isinstance(exc, _AUTHORIZATION + _AUTHENTICATION):
        return EventLogAuthError(f"{what}: authentication/authorization failed ({named})")
    if isinstance(exc, kafka_errors.KafkaConfigurationError | kafka_errors.IllegalArgumentError):
        return EventLogConfigError(f"{what}: invalid client configuration ({named})")
    if isinstance(exc, kafka_errors.KafkaTimeoutError | asyncio.TimeoutError | TimeoutError):
        return EventLogTransportError(f"{what}: timed out ({named})", retriable=True)
    if isinstance(exc, OSError):
        return EventLogTransportError(f"{what}: connection failed ({named})", retriable=True)
    if isinstance(exc, kafka_errors.KafkaError):
        return EventLogTransportError(f"{what}: {named}", retriable=bool(exc.retriable))
    return EventLogTransportError(f"{what}: unexpected {named}", retriable=False)


def _named(exc: BaseException) -> str:
    """``Name: message`` once (aiokafka's errors already start their text with their
    name, or are only their name)."""
    name, text = type(exc).__name__, str(exc)
    if not text or text == name:
        return name
    return text if text.startswith(name) or f"] {name}" in text else f"{name}: {text}"


def _raise_for_code(code: int, what: str, access: Access | None = None) -> None:
    if code:
        error_type = kafka_errors.for_code(code)
        raise translate_error(error_type(), what, access)


async def describe_partition_count(
    admin: AIOKafkaAdminClient, topic: str, principal: str = "this client"
) -> int | None:
    """Partition count of ``topic``, or None if it does not exist.

    Existence is checked with an all-topics Metadata request first: a Metadata
    request naming the topic lets a broker with auto.create.topics.enable (Kafka's
    default, and Tansu) create it with its default partition count.
    """
    if topic not in await admin.list_topics():
        return None
    described = await admin.describe_topics([topic])
    for entry in described:
        if entry["topic"] != topic:
            continue
        code = entry["error_code"]
        if code == kafka_errors.UnknownTopicOrPartitionError.errno:
            return None
        _raise_for_code(code, f"describe topic {topic}", Access(principal, "DESCRIBE", topic))
        return len(entry["partitions"])
    return None


async def ensure_topic(
    admin: AIOKafkaAdminClient,
    topic: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    *,
    create: bool,
    timeout_s: float,
    principal: str = "this client",
) -> bool:
    """Create ``topic`` if missing, then check its partition count; True if created here."""
    found = await describe_partition_count(admin, topic, principal)
    created = False
    if found is None:
        if not create:
            raise EventLogConfigError(
                f"topic {topic} is not visible to {principal}: it does not exist, or"
                f" {principal} lacks DESCRIBE on it (create_topic is false; expected"
                f" {partitions} partitions)"
            )
        response = await admin.create_topics(
            [NewTopic(topic, partitions, replication_factor, topic_configs=configs)]
        )
        for name, code, message in _topic_errors(response):
            if code == kafka_errors.TopicAlreadyExistsError.errno:
                continue  # another instance created it first: verify it below
            if code == kafka_errors.InvalidReplicationFactorError.errno:
                # Kafka's default (3) on a cluster with fewer brokers: refused at once.
                # Or a cluster still starting: its brokers register one by one.
                raise EventLogConfigError(
                    f"create topic {name}: replication_factor={replication_factor} "
                    "(remote.log.metadata.topic.replication.factor) is more than the "
                    f"brokers registered now ({message}); while the cluster starts this "
                    "clears once they have registered, otherwise set it to at most their "
                    "number"
                )
            if code in (e.errno for e in _AUTHORIZATION):
                # A principal without DESCRIBE does not see the topic either: say both.
                raise EventLogAuthorizationError(
                    principal,
                    "CREATE",
                    name,
                    f"it is not visible to {principal}, so it is missing or {principal} lacks"
                    " DESCRIBE on it; create it beforehand or grant CREATE",
                )
            if code:
                err = translate_error(kafka_errors.for_code(code)(message), f"create topic {name}")
                if isinstance(err, EventLogTransportError) and not err.retriable:
                    raise EventLogConfigError(f"create topic {name}: {message or err}") from err
                raise err
            created = True
        found = await _await_topic_metadata(admin, topic, timeout_s)
    if found != partitions:
        raise EventLogConfigError(
            f"topic {topic} exists with {found} partitions, expected {partitions}: "
            "the metadata partitioner depends on the count, refusing to use it "
            f"(set partitions / remote.log.metadata.topic.num.partitions to {found})"
        )
    return created


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    out = []
    for entry in response.topic_errors:
        # v0 has (topic, error_code); v1+ adds error_message.
        name, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        out.append((name, code, message))
    return out


async def _await_topic_metadata(admin: AIOKafkaAdminClient, topic: str, timeout_s: float) -> int:
    """Wait until a just-created topic shows up in metadata (brokers propagate it async)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        found = await describe_partition_count(admin, topic)
        if found:
            return found
        if loop.time() >= deadline:
            raise EventLogTransportError(
                f"topic {topic} was created but is not in the metadata after {timeout_s:.1f}s"
            )
        await asyncio.sleep(0.1)


async def fetch_end_offsets(
    client: AIOKafkaClient,
    topic: str,
    partitions: Iterable[int],
    *,
    timeout_s: float = 30.0,
    backoff_s: float = 0.05,
    max_backoff_s: float = 1.0,
    principal: str = "this client",
    brokers: BrokerReachability | None = None,
) -> dict[int, int]:
    """Log end offset (high watermark) of each partition, read from Fetch responses.

    ListOffsets(latest) is asked first only as a hint of where to fetch, so the
    fetch returns little data on a correct broker; the answer is the fetch's
    high watermark. Partitions a broker leaves out of its answer, or answers for
    with a metadata error, are asked again after a backoff until ``timeout_s``:
    Apache Kafka answers NOT_LEADER_OR_FOLLOWER for a while after it created a
    topic (its partitions become leaders asynchronously), Tansu never does.
    """
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    result: dict[int, int] = {}
    attempt = 0
    while True:
        missing = [p for p in wanted if p not in result]
        if not missing:
            return result
        if attempt and loop.time() + backoff_s >= deadline:
            raise EventLogTransportError(
                f"end offsets of topic {topic} partitions {missing}: no high watermark "
                f"after {attempt} fetch attempts in {timeout_s:.1f}s"
            )
        if attempt:
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, max_backoff_s)
        by_leader = await _leaders(client, topic, missing)
        answers = await asyncio.gather(
            *(
                _end_offsets_from(client, node, topic, ps, attempt, principal, brokers)
                for node, ps in by_leader.items()
            )
        )
        for answer in answers:
            result.update(answer)
        attempt += 1


async def _send(
    client: AIOKafkaClient, node: int, request: Any, brokers: BrokerReachability | None
) -> Any:
    """``client.send``, telling ``brokers`` whether ``node`` could be reached."""
    try:
        response = await client.send(node, request)
    except UNREACHABLE as e:
        if brokers is not None:
            brokers.unreachable(node, address_of(client, node), e)
        raise
    if brokers is not None:
        brokers.reachable(node)
    return response


async def _leaders(
    client: AIOKafkaClient, topic: str, partitions: list[int]
) -> dict[int, list[int]]:
    if client.cluster.partitions_for_topic(topic) is None:
        client.add_topic(topic)
        await client.force_metadata_update()
    by_leader: dict[int, list[int]] = {}
    stale = False
    for p in partitions:
        leader = client.cluster.leader_for_partition(TopicPartition(topic, p))
        if leader is None or leader == -1:
            stale = True
            continue
        by_leader.setdefault(leader, []).append(p)
    if stale:
        await client.force_metadata_update()
    return by_leader


async def _end_offsets_from(
    client: AIOKafkaClient,
    node: int,
    topic: str,
    partitions: list[int],
    attempt: int,
    principal: str,
    brokers: BrokerReachability | None = None,
) -> dict[int, int]:
    what = f"end offsets of {topic} partitions {partitions}"
    stale = False
    hints: dict[int, int] = {}
    # First attempt starts at ListOffsets(latest), retries at (earliest) in case the
    # hint was past the log; either way only the fetch's high watermark is trusted.
    timestamp = -1 if attempt == 0 else -2
    offsets = await _send(
        client, node, OffsetRequest(-1, 0, [(topic, [(p, timestamp) for p in partitions])]),
        brokers,
    )  # fmt: skip
    for _name, part_data in offsets.topics:
        for part, code, *info in part_data:
            if code == 0:
                hints[part] = max(0, info[-1] if info else 0)
            elif kafka_errors.for_code(code).invalid_metadata:
                stale = True
            else:
                describe = Access(principal, "DESCRIBE", topic)
                _raise_for_code(code, f"{what} (partition {part})", describe)
    result: dict[int, int] = {}
    if hints:
        # max_wait > 0: Tansu answers a zero-wait fetch with no partitions at all.
        request = FetchRequest(
            min(1 + 50 * attempt, 200),
            1,
            1024 * 1024,
            0,
            [(topic, [(p, hints[p], 1) for p in sorted(hints)])],
        )
        response = await _send(client, node, request, brokers)
        for _name, part_data in response.topics:
            for entry in part_data:
                part, code, highwater = entry[0], entry[1], entry[2]
                if code == kafka_errors.OffsetOutOfRangeError.errno:
                    continue  # the hint moved past the log (truncation): next attempt
                if code and kafka_errors.for_code(code).invalid_metadata:
                    stale = True
                    continue
                _raise_for_code(
                    code, f"{what} (partition {part})", Access(principal, "READ", topic)
                )
                if highwater >= 0:
                    result[part] = highwater
    if stale:
        await client.force_metadata_update()
    return result
