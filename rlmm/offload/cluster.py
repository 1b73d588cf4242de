"""ClusterClient: what the sidecar learns from its Kafka cluster over the Kafka protocol.

Job: for the topics found in the broker's log dirs, ask the cluster who leads each
partition and at which leader epoch (Metadata v7, the first version carrying the
epoch; aiokafka stops at v5), and which topics the cluster tiers itself with Kafka's
own RemoteLogManager (DescribeConfigs: the broker's
``remote.log.storage.system.enable`` and each topic's ``remote.storage.enable``); and,
less often, every config set on a topic itself (``topic_configs``), which the sidecar
keeps in the store for ``rlmm restore``; and, each round, the last stable offset of
each partition led, as this broker holds it in memory (``stable_offsets``).

Invariants: every call is bounded by ``timeout_s``; a cancelled call raises
CancelledError even where aiokafka turned the cancellation into one of its own errors
(a leadership poll cancelled at a round's end must end); any failure (unreachable,
refused, denied, a partition or topic error) raises LeadershipError naming the
cluster and the cause: the caller never gets a partial view that it could read as
"lead everything" (``stable_offsets`` alone leaves out a partition the broker does not
answer for: its caller bounds that one by the log dir's checkpoint); calls may run at
once over one connection; the client is closed by ``close()``, which is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import DescribeConfigsRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Schema, String

from eventlog.kafka_client import UNREACHABLE, BrokerReachability, address_of
from rlmm.config import OFFLOAD_TOPIC_SETTINGS
from rlmm.offload.errors import LeadershipError, OffloadError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

NO_LEADER = -1
_TOPIC, _BROKER = 2, 4  # DescribeConfigs resource types
SYSTEM_ENABLE = "remote.log.storage.system.enable"
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
# The topic configs the sidecar follows (KIP-405's retention, KIP-950's switches,
# KIP-1241's copy delay): the same names an [offload.topics.<topic>] section may set,
# so what the cluster says and what the file overrides are one list. A broker's
# default comes with each as the topic's value (``log.retention.ms`` for
# ``retention.ms``, ``log.remote.copy.lag.ms`` for ``remote.copy.lag.ms``); a name the
# cluster does not know (KIP-1241's before Kafka 4.4) is left out of its answer.
TOPIC_CONFIGS = OFFLOAD_TOPIC_SETTINGS
_DEFAULT_CONFIG = 5  # DescribeConfigs v1+ config_source: Kafka's built-in default
_TOPIC_CONFIG = 1  # DescribeConfigs v1+ config_source: set on the topic itself
# ListOffsets at LATEST under READ_COMMITTED (v2+) answers the last stable offset: the
# high watermark, or the first offset of the oldest transaction still open below it.
_LATEST = -1
_READ_COMMITTED = 1


class MetadataResponse_v7(Response):
    API_KEY = 3
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("brokers", Array(("node_id", Int32), ("host", String("utf-8")), ("port", Int32),
                          ("rack", String("utf-8")))),
        ("cluster_id", String("utf-8")),
        ("controller_id", Int32),
        ("topics", Array(
            ("error_code", Int16),
            ("topic", String("utf-8")),
            ("is_internal", Boolean),
            ("partitions", Array(
                ("error_code", Int16),
                ("partition", Int32),
                ("leader", Int32),
                ("leader_epoch", Int32),
                ("replicas", Array(Int32)),
                ("isr", Array(Int32)),
                ("offline_replicas", Array(Int32)),
            )),
        )),
    )  # fmt: skip


class MetadataRequest_v7(RequestStruct):
    API_KEY = 3
    API_VERSION = 7
    RESPONSE_TYPE = MetadataResponse_v7
    SCHEMA = Schema(("topics", Array(String("utf-8"))), ("allow_auto_topic_creation", Boolean))


class LeaderMetadataRequest(Request[MetadataRequest_v7]):
    """Metadata of named topics, with each partition's leader epoch (never creates one)."""

    API_KEY = 3

    def __init__(self, topics: list[str]) -> None:
        self._topics = topics

    def build(self, request_struct_class: type[MetadataRequest_v7]) -> MetadataRequest_v7:
        return request_struct_class(self._topics, False)


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    """One partition as the cluster describes it."""

    leader: int  # node id, NO_LEADER while none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterView:
    """One answer of the cluster: leadership per (topic, partition), and the topics the
    cluster tiers itself (``kafka_tiered``)."""

    partitions: Mapping[tuple[str, int], PartitionLeadership]
    kafka_tiered: frozenset[str]
    brokers: frozenset[int]
    configs_seen: bool = True  # False: DescribeConfigs was denied (kafka_tiered is empty)
    # per topic, the TOPIC_CONFIGS the cluster sets (on the topic or as a broker's
    # default; never Kafka's built-in defaults), as Kafka sends them
    topic_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


_ABANDONED = "Unclosed AIOKafkaConnection"


def quiet_abandoned_connections(loop: asyncio.AbstractEventLoop) -> None:
    """Log aiokafka's "Unclosed AIOKafkaConnection" as a warning on ``loop``, every
    other unhandled error as before.

    A call bounded by ``timeout_s`` that times out while aiokafka opens a connection
    (a broker that accepts but does not answer, e.g. stopped) cancels the connect;
    aiokafka then never returns the connection, and when it is collected aiokafka
    closes it itself and reports it to the loop's handler, which asyncio logs at
    ERROR. Nothing is left open and the timeout was already reported (leadership
    unknown), so an error line for it would be an error nobody caused."""
    previous = loop.get_exception_handler()

    def handler(the_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == _ABANDONED:
            log.warning("aiokafka closed a connection a timed-out call abandoned: %r",
                        context.get("conn"))  # fmt: skip
        elif previous is not None:
            previous(the_loop, context)
        else:
            the_loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


class ClusterClient:
    """A small Kafka client for leadership and tiering configs (see the module docstring)."""

    def __init__(
        self,
        client_kwargs: Mapping[str, Any],
        node_id: int,
        *,
        timeout_s: float = 10.0,
        brokers: BrokerReachability | None = None,
    ) -> None:
        # One line when a broker becomes unreachable or answers again (shared with the
        # event log's clients of the same cluster: one outage, one line).
        self.brokers = brokers if brokers is not None else BrokerReachability()
        self._kwargs = dict(client_kwargs)
        self._kwargs.setdefault("client_id", "rlmm-offload-leadership")
        self._kwargs.setdefault("request_timeout_ms", int(timeout_s * 1000))
        self.bootstrap = str(self._kwargs.get("bootstrap_servers", ""))
        self.principal = _principal(self._kwargs)
        self.node_id = node_id
        self.timeout_s = timeout_s
        self._client: AIOKafkaClient | None = None
        # A round's stable_offsets and a gain's, or the poll's view, may run at once:
        # after a reset only one of them connects (the other's client would never close).
        self._connecting = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"ClusterClient({self.bootstrap!r}, node {self.node_id})"

    async def view(self, topics: Collection[str]) -> ClusterView:
        """Leadership and tiering of ``topics``; LeadershipError when not learned whole."""
        if self._closed:
            raise LeadershipError("the cluster client is closed")
        try:
            view = await asyncio.wait_for(self._view(sorted(topics)), self.timeout_s)
            # Python 3.11's wait_for returns the result, swallowing a cancellation that
            # came as the answer did: the caller's cancellation still wins.
            raise_if_cancelling(None)
            return view
        except LeadershipError as e:
            raise_if_cancelling(e)
            raise
        except TimeoutError as e:
            raise_if_cancelling(e)
            await self._reset()
            raise LeadershipError(
                f"the cluster at {self.bootstrap} did not answer within {self.timeout_s:g} s"
            ) from e
        except (kafka_errors.KafkaError, OSError) as e:
            raise_if_cancelling(e)
            await self._reset()
            raise LeadershipError(_why(e, self.bootstrap, principal=self.principal)) from e

    async def _connected(self) -> AIOKafkaClient:
        async with self._connecting:
            if self._client is None:
                client = AIOKafkaClient(**self._kwargs)
                try:
                    await client.bootstrap()
                except BaseException:
                    await client.close()
                    raise
                self._client = client
            return self._client

    async def _reset(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        # aiokafka's close() suppresses a CancelledError that reaches it while it waits
        # for its metadata task: a cancellation that came meanwhile is raised here.
        raise_if_cancelling(None)

    async def _view(self, topics: list[str]) -> ClusterView:
        client = await self._connected()
        brokers = frozenset(b.nodeId for b in client.cluster.brokers())
        if not brokers:
            raise LeadershipError(f"the cluster at {self.bootstrap} lists no broker")
        # Ask our own broker first (it answers for its own configs), then any other.
        order = [self.node_id] if self.node_id in brokers else []
        order += sorted(brokers - {self.node_id})
        last: BaseException | None = None
        for node in order:
            try:
                view = await self._ask(client, node, topics, brokers)
            except UNREACHABLE as e:
                raise_if_cancelling(e)
                self.brokers.unreachable(node, address_of(client, node), e)
                last = e  # a broker that is down: the next one answers
                continue
            self.brokers.reachable(node)
            return view
        assert last is not None
        raise last

    async def _ask(
        self, client: AIOKafkaClient, node: int, topics: list[str], brokers: frozenset[int]
    ) -> ClusterView:
        partitions: dict[tuple[str, int], PartitionLeadership] = {}
        if topics:
            response = await client.send(node, LeaderMetadataRequest(topics))
            for t in response.topics:
                error_code, topic, _internal, parts = t
                if error_code == kafka_errors.UnknownTopicOrPartitionError.errno:
                    continue  # deleted meanwhile: nobody leads it
                _check(error_code, f"metadata of topic {topic}", self.bootstrap, self.principal)
                for p in parts:
                    p_error, partition, leader, epoch, replicas, isr, _offline = p
                    if p_error and p_error != kafka_errors.LeaderNotAvailableError.errno:
                        _check(
                            p_error, f"metadata of {topic}-{partition}", self.bootstrap,
                            self.principal,
                        )  # fmt: skip
                    partitions[(topic, partition)] = PartitionLeadership(
                        leader if not p_error else NO_LEADER, epoch, tuple(replicas), tuple(isr)
                    )
        configs = await self._configs(client, node, topics)
        if configs is None:
            return ClusterView(partitions, frozenset(), brokers, configs_seen=False)
        tiered, topic_configs = configs
        return ClusterView(partitions, tiered, brokers, topic_configs=topic_configs)

    async def _configs(
        self, client: AIOKafkaClient, node: int, topics: list[str]
    ) -> tuple[frozenset[str], dict[str, dict[str, str]]] | None:
        """The topics with remote.storage.enable=true on a cluster whose brokers tier,
        and each topic's TOPIC_CONFIGS the cluster sets; None when the cluster denies
        this principal DescribeConfigs (then the sidecar knows Kafka's tiered topics by
        their segments in the metadata only, and follows its own config alone).

        A broker's own configs are answered by that broker only: asked only when
        ``node`` is ours. Kafka refuses remote.storage.enable=true on a topic while
        the system is off, so the topic's flag alone still says enough without it."""
        if not topics:
            return frozenset(), {}
        resources: list[tuple[int, str, list[str] | None]] = [
            (_TOPIC, t, list(TOPIC_CONFIGS)) for t in topics
        ]
        if node == self.node_id:
            resources.append((_BROKER, str(node), [SYSTEM_ENABLE]))
        response = await client.send(node, DescribeConfigsRequest(resources))
        system = True
        enabled: set[str] = set()
        topic_configs: dict[str, dict[str, str]] = {}
        for resource in response.resources:
            error_code, _message, kind, name, entries = resource[:5]
            if kind == _TOPIC and error_code == kafka_errors.UnknownTopicOrPartitionError.errno:
                continue
            if error_code in _DENIED:
                return None
            _check(error_code, f"configs of {'topic' if kind == _TOPIC else 'broker'} {name}",
                   self.bootstrap, self.principal)  # fmt: skip
            values = {entry[0]: entry[1] for entry in entries}
            if kind == _BROKER:
                system = str(values.get(SYSTEM_ENABLE, "false")).lower() == "true"
                continue
            if str(values.get(REMOTE_STORAGE_ENABLE, "false")).lower() == "true":
                enabled.add(name)
            topic_configs[name] = {
                entry[0]: entry[1]
                for entry in entries
                if entry[1] is not None and not _built_in(entry, response.API_VERSION)
            }
        return (frozenset(enabled) if system else frozenset()), topic_configs

    async def topic_configs(self, topics: Collection[str]) -> dict[str, dict[str, str]]:
        """The configs set on each of ``topics`` itself (every name Kafka describes whose
        source is the topic: what ``kafka-configs --describe`` lists for it, not the
        brokers' defaults; sensitive values, which Kafka does not send, left out). A
        topic deleted meanwhile is left out. OffloadError, naming the cluster and the
        cause, when they cannot be learned whole (a denial says what to grant)."""
        if self._closed:
            raise OffloadError("the cluster client is closed")
        if not topics:
            return {}
        return await self._asked(
            self._topic_configs(sorted(topics)),
            f"the cluster at {self.bootstrap} did not describe topic configs",
            f"cannot describe topic configs at {self.bootstrap}",
        )

    async def _topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        client = await self._connected()
        node = client.get_random_node()
        if node is None:
            raise OffloadError(f"the cluster at {self.bootstrap} lists no broker")
        request = DescribeConfigsRequest([(_TOPIC, t, None) for t in topics])
        response = await client.send(node, request)
        out: dict[str, dict[str, str]] = {}
        for resource in response.resources:
            error_code, message, _kind, name, entries = resource[:5]
            if error_code == kafka_errors.UnknownTopicOrPartitionError.errno:
                continue
            if error_code:
                error = kafka_errors.for_code(error_code)
                grant = (
                    "; the sidecar needs DESCRIBE_CONFIGS on the topics it offloads"
                    if error_code in _DENIED
                    else ""
                )
                raise OffloadError(
                    f"the cluster at {self.bootstrap} refuses the configs of topic {name}"
                    f" to {self.principal}: {error.__name__} {message or ''}".rstrip()
                    + grant
                )
            out[name] = {
                entry[0]: entry[1]
                for entry in entries
                if entry[1] is not None and _set_on_topic(entry, response.API_VERSION)
            }
        return out

    async def stable_offsets(self, tps: Collection[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The last stable offset of each of ``tps`` (topic, partition) as this broker
        (``node_id``) holds it in memory: ListOffsets LATEST under READ_COMMITTED, the
        bound Kafka's own RemoteLogManager copies by. Asked of this broker alone: the
        sidecar reads its log dirs, so another broker's answer would bound files it did
        not write. A partition it does not answer for (NOT_LEADER_OR_FOLLOWER, unknown,
        a leader still loading) is left out; OffloadError, naming the cluster and the
        cause, when it cannot be asked at all."""
        if self._closed:
            raise OffloadError("the cluster client is closed")
        if not tps:
            return {}
        return await self._asked(
            self._stable_offsets(sorted(tps)),
            f"broker {self.node_id} at {self.bootstrap} did not answer ListOffsets",
            f"cannot list the last stable offsets of broker {self.node_id} at {self.bootstrap}",
        )

    async def _asked(self, call: Awaitable[_T], timed_out: str, failed: str) -> _T:
        """``call``, bounded by ``timeout_s``; a timeout or a client error resets the
        connection and is an OffloadError (``timed_out`` or ``failed``, and the cause)."""
        try:
            found = await asyncio.wait_for(call, self.timeout_s)
            raise_if_cancelling(None)
            return found
        except OffloadError as e:
            raise_if_cancelling(e)
            raise
        except TimeoutError as e:
            raise_if_cancelling(e)
            await self._reset()
            raise OffloadError(f"{timed_out} within {self.timeout_s:g} s") from e
        except (kafka_errors.KafkaError, OSError) as e:
            raise_if_cancelling(e)
            await self._reset()
            raise OffloadError(f"{failed}: {_error_text(e)}") from e

    async def _stable_offsets(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        client = await self._connected()
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append((partition, _LATEST))
        # replica_id -1: a consumer's request, answered by the leader only
        request = OffsetRequest(-1, _READ_COMMITTED, list(by_topic.items()))
        response = await client.send(self.node_id, request)
        out: dict[tuple[str, int], int] = {}
        for topic, partitions in response.topics:
            for p in partitions:
                partition, error_code, offset = p[0], p[1], p[3]
                if error_code or offset < 0:
                    why = kafka_errors.for_code(error_code).__name__ if error_code else "none"
                    log.debug("%s-%d: no last stable offset from broker %d (%s)",
                              topic, partition, self.node_id, why)  # fmt: skip
                    continue
                out[(topic, partition)] = offset
        return out

    async def close(self) -> None:
        """Close the connection; idempotent."""
        self._closed = True
        await self._reset()


def _built_in(entry: Any, version: int) -> bool:
    """A DescribeConfigs entry holding Kafka's built-in default (v0: is_default; v1 on:
    config_source DEFAULT_CONFIG)."""
    return bool(entry[3]) if version == 0 else entry[3] == _DEFAULT_CONFIG


def _error_text(error: BaseException) -> str:
    """``Name: text``, without aiokafka's repetition of the class name in the text."""
    name = type(error).__name__
    text = str(error).strip()
    while text.startswith(f"{name}: "):
        text = text[len(name) + 2 :]
    return f"{name}: {text}" if text and text != name else name


def _set_on_topic(entry: Any, version: int) -> bool:
    """A DescribeConfigs entry of a value set on the topic itself (v0, which has no
    source: any value that is not a default)."""
    return not entry[3] if version == 0 else entry[3] == _TOPIC_CONFIG


def raise_if_cancelling(exc: BaseException | None = None) -> None:
    """aiokafka raises its own errors in place of CancelledError: a task being cancelled
    re-raises the cancellation instead of reading them as a failure of the cluster."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


_DENIED = (
    kafka_errors.TopicAuthorizationFailedError.errno,
    kafka_errors.ClusterAuthorizationFailedError.errno,
)


def _principal(kwargs: Mapping[str, Any]) -> str:
    """Who the cluster sees, for messages (never a password)."""
    protocol = str(kwargs.get("security_protocol", "PLAINTEXT"))
    if protocol.startswith("SASL") and kwargs.get("sasl_plain_username"):
        return f"User:{kwargs['sasl_plain_username']}"
    if protocol == "SSL":
        return "the client certificate's principal"
    return "User:ANONYMOUS" if protocol == "PLAINTEXT" else "this client's principal"


def _check(error_code: int, what: str, bootstrap: str, principal: str = "this sidecar") -> None:
    if error_code:
        error = kafka_errors.for_code(error_code)
        raise LeadershipError(_why(error(), bootstrap, what, principal))


def _why(
    error: BaseException, bootstrap: str, what: str = "", principal: str = "this sidecar"
) -> str:
    """One line: what failed at which cluster, and why (a denial says what to grant)."""
    name = type(error).__name__
    doing = f" ({what})" if what else ""
    if isinstance(
        error,
        kafka_errors.TopicAuthorizationFailedError | kafka_errors.ClusterAuthorizationFailedError,
    ):
        return (
            f"the cluster at {bootstrap} denies {principal}{doing}: {name}; the sidecar needs"
            " DESCRIBE and DESCRIBE_CONFIGS on the topics it offloads (and DESCRIBE_CONFIGS"
            " on the cluster)"
        )
    text = str(error).strip()
    while text.startswith(f"{name}: "):  # aiokafka repeats the class name in the text
        text = text[len(name) + 2 :]
    return f"cannot learn leadership from the cluster at {bootstrap}{doing}: {name}" + (
        f": {text}" if text and text != name else ""
    )


__all__ = [
    "NO_LEADER",
    "TOPIC_CONFIGS",
    "ClusterClient",
    "ClusterView",
    "LeaderMetadataRequest",
    "MetadataRequest_v7",
    "MetadataResponse_v7",
    "PartitionLeadership",
    "raise_if_cancelling",
]
