"""KafkaEventLog: the event log on a Kafka topic (``__remote_log_metadata``) via aiokafka.

Job: append records with acks=all, read partitions by manual assignment through
one shared consumer, report log end offsets, and create or verify the topic on
start. Its settings are a KafkaLogSettings (``eventlog._kafka_settings``, exported
here); Kafka's RLMM property names are accepted via :meth:`KafkaEventLog.from_properties`.
The Kafka client helpers it shares with rlmm's offloader and restore are
``eventlog.kafka_client``'s.

Invariant: an offset returned by ``append``/``append_batch`` comes from the
broker's acknowledgement (acks=all), so it is replicated per the topic's
min.insync.replicas; ``append_batch`` is one record batch, so it lands atomically
and in order. Retries are bounded by ``delivery_timeout_ms``. The producer is not
idempotent (Tansu supports only that), so a retried append whose first attempt
did land may be stored twice: delivery is at least once, never silently lost.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.producer.message_accumulator import BatchBuilder

from eventlog._cancellation import raise_if_cancelling
from eventlog._kafka_admin import Access, ensure_topic, fetch_end_offsets, translate_error
from eventlog._kafka_config import map_properties
from eventlog._kafka_fanout import KafkaFanout
from eventlog._kafka_probe import probe_credentials, probe_reachable, wait_listening
from eventlog._kafka_settings import COMPRESSION_ATTRS, DEFAULT_TOPIC, KafkaLogSettings
from eventlog.errors import (
    EventLogClosedError,
    EventLogConfigError,
    EventLogError,
    EventLogRecordTooLargeError,
    EventLogRefusedError,
    EventLogTransportError,
    InvalidOffsetError,
    InvalidRecordError,
)

# Re-exported: another client of the same cluster (the sidecar's leadership client)
# reports to the log's BrokerReachability; eventlog.kafka_client is their home.
from eventlog.kafka_client import UNREACHABLE as UNREACHABLE
from eventlog.kafka_client import BrokerReachability as BrokerReachability
from eventlog.log import EventLog

log = logging.getLogger(__name__)

BOOTSTRAP_PROPERTY = "remote.log.metadata.common.client.bootstrap.servers"
DEFAULT_PARTITIONS = 50


class KafkaEventLog(EventLog):
    """An EventLog stored in a Kafka topic; one partition of the log = one topic partition."""

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        partitions: int = DEFAULT_PARTITIONS,
        settings: KafkaLogSettings | None = None,
    ) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise EventLogConfigError(f"partitions must be a positive int, got {partitions!r}")
        self.settings = settings = settings if settings is not None else KafkaLogSettings()
        self._security = settings.security
        self._bootstrap_servers = bootstrap_servers
        self._partitions = partitions
        self.topic = settings.topic
        self.replication_factor = settings.replication_factor
        self.retention_ms = settings.retention_ms
        self.create_topic = settings.create_topic
        self.consume_wait_ms = settings.consume_wait_ms
        # Brokers its requests could not reach: one line per outage, not per attempt
        # (shared with another client of the process: ``brokers``).
        self.brokers = BrokerReachability()
        refused_ms = settings.refused_timeout_ms
        self._refused_s = None if refused_ms is None else refused_ms / 1000
        self._producer_config: dict[str, Any] = {
            "linger_ms": settings.linger_ms,
            "max_request_size": settings.max_request_size,
            **settings.producer_config,
        }
        self._producer: AIOKafkaProducer | None = None
        self._control: AIOKafkaClient | None = None
        self._fanout: KafkaFanout | None = None
        self._start_lock = asyncio.Lock()
        self._guard: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self.topic_created = False

    # Kafka's own RLMM property names (``remote.log.metadata.*``), as a mapping.
    extra_options: ClassVar[frozenset[str]] = frozenset({"properties"})
    shared: ClassVar[bool] = True
    kafka_client: ClassVar[bool] = True

    @classmethod
    def options(cls) -> dict[str, Any]:
        """The cluster, the partition count, KafkaLogSettings' configuration keys and
        ``properties``."""
        return {
            "bootstrap_servers": inspect.Parameter.empty,
            "partitions": DEFAULT_PARTITIONS,
            **KafkaLogSettings.config_keys(),
            **dict.fromkeys(cls.extra_options, inspect.Parameter.empty),
        }

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> KafkaEventLog:
        """From settings: ``options()``' keys; under ``properties``, Kafka's RLMM property
        names (mapped by ``from_properties``; the other keys win)."""
        kwargs = dict(options)
        properties = kwargs.pop("properties", None)
        if "bootstrap_servers" not in kwargs:
            raise EventLogConfigError(
                "eventlog.type = 'kafka' needs eventlog.bootstrap_servers (or Kafka's"
                f" {BOOTSTRAP_PROPERTY})"
            )
        if not properties:
            return cls._from_flat(kwargs)
        props = dict(properties)
        servers = kwargs["bootstrap_servers"]
        # from_properties wants Kafka's bootstrap property even when ours names it.
        props.setdefault(
            BOOTSTRAP_PROPERTY, servers if isinstance(servers, str) else ",".join(servers)
        )
        return cls.from_properties(props, **kwargs)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **overrides: Any) -> KafkaEventLog:
        """Build from Kafka's RLMM properties (``remote.log.metadata.*``; see
        _kafka_config); ``overrides`` are ``options()``' keys, and win."""
        mapped = map_properties(props)
        kwargs = dict(mapped.kwargs)
        if mapped.producer_config:
            kwargs["producer_config"] = mapped.producer_config
        if mapped.consumer_config:
            kwargs["consumer_config"] = mapped.consumer_config
        kwargs.update(overrides)
        return cls._from_flat(kwargs)

    @classmethod
    def _from_flat(cls, options: dict[str, Any]) -> KafkaEventLog:
        bootstrap = options.pop("bootstrap_servers")
        partitions = options.pop("partitions", DEFAULT_PARTITIONS)
        return cls(bootstrap, partitions, KafkaLogSettings.from_options(options))

    @classmethod
    def read_only_options(cls, options: Mapping[str, Any], *, wait_ms: int) -> dict[str, Any]:
        """A missing topic is an error, not created; a broker that does not answer
        fails after ``wait_ms`` unless the settings give their own wait."""
        return {"init_timeout_ms": wait_ms, **options, "create_topic": False}

    @property
    def partition_count(self) -> int:
        return self._partitions

    @property
    def bootstrap_servers(self) -> str | list[str]:
        return self._bootstrap_servers

    def __repr__(self) -> str:
        return (
            f"KafkaEventLog(bootstrap_servers={self._bootstrap_servers!r}, "
            f"topic={self.topic!r}, partitions={self._partitions})"
        )

    # -- lifecycle ------------------------------------------------------------

    def client_settings(self) -> dict[str, Any]:
        """aiokafka client keyword arguments of this log's cluster (bootstrap servers and
        security), for another client of the same cluster with the same identity."""
        return self._client_kwargs()

    def _client_kwargs(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self._bootstrap_servers,
            "client_id": self.settings.client_id,
            "request_timeout_ms": self.settings.request_timeout_ms,
            "retry_backoff_ms": self.settings.retry_backoff_ms,
            **self._security.kwargs(),
        }

    def _new_consumer(self) -> AIOKafkaConsumer:
        # Kafka's consumer default: a fetch returns as soon as a record arrives, so the
        # wait only sets how often an idle consumer asks (200 ms cost rlmm serve about
        # 1% of a core at rest); consumer_config's fetch_max_wait_ms overrides it.
        config: dict[str, Any] = {"fetch_max_wait_ms": 500, **self.settings.consumer_config}
        return AIOKafkaConsumer(
            **self._client_kwargs(),
            group_id=None,
            enable_auto_commit=False,
            # Only reached when a fetch position is out of range (a reader starting
            # past the end on real Kafka): restart low, readers skip what they had.
            auto_offset_reset="earliest",
            **config,
        )

    async def start(self) -> None:
        """Connect, create or verify the topic, start producer and shared consumer.

        Retriable failures (a broker that accepts connections but is not ready yet)
        are retried with backoff for ``init_timeout_ms`` (Kafka's
        ``remote.log.metadata.initialization.retry.max.timeout.ms``); then one
        EventLogTransportError with the last reason. With ``refused_timeout_ms`` set, a
        bootstrap where every server refuses the connection (nothing listens: a broker
        down, a wrong address) is retried that long only, counted from the first
        refusal and started again once a server accepts. Bootstrap names that do not
        resolve fail at once (EventLogConfigError). Idempotent.
        """
        async with self._start_lock:
            if self._closed:
                raise EventLogClosedError(f"kafka log {self.topic} is closed")
            if self._started:
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.settings.init_timeout_ms / 1000
            backoff = self.settings.init_retry_backoff_ms / 1000
            where = f"start kafka log {self.topic} at {self._bootstrap_servers}"
            reason = "no attempt finished"
            refused_since: float | None = None  # when the refusals in a row began
            while True:
                attempt_started = loop.time()
                try:
                    async with asyncio.timeout(max(0.0, deadline - loop.time())):
                        await self._start_once()
                    break
                except Exception as exc:  # translated below
                    await self._close_clients()
                    raise_if_cancelling(exc)
                    err = translate_error(
                        exc, where, Access(self._security.principal, "DESCRIBE", self.topic)
                    )
                    if not isinstance(exc, TimeoutError) and not err.retriable:
                        raise err from exc
                    if not isinstance(exc, TimeoutError):
                        # the last attempt's reason, without `where` a second time
                        reason = str(err).removeprefix(f"{where}: ")
                    if isinstance(exc, TimeoutError) or loop.time() + backoff >= deadline:
                        raise EventLogTransportError(
                            f"{where}: not reachable within {self.settings.init_timeout_ms} ms"
                            f" ({reason}); the wait is Kafka's"
                            " remote.log.metadata.initialization.retry.max.timeout.ms",
                            retriable=True,
                        ) from exc
                    if not isinstance(err, EventLogRefusedError) or self._refused_s is None:
                        refused_since = None  # something listens: a broker starting
                    elif refused_since is None:
                        refused_since = attempt_started
                    pause = backoff
                    if refused_since is not None and self._refused_s is not None:
                        # the last attempt at the window's end: a broker that binds its
                        # port just before it is not missed by a long backoff
                        pause = min(pause, refused_since + self._refused_s - loop.time())
                    if refused_since is not None and pause <= 0:
                        raise EventLogTransportError(
                            f"{where}: nothing listens there ({reason}, refused for"
                            f" {self.settings.refused_timeout_ms} ms): check bootstrap_servers"
                            " and that the broker runs; eventlog.refused_timeout_ms sets this"
                            " wait (a broker that accepts connections is waited for up to"
                            " eventlog.init_timeout_ms)",
                            retriable=True,
                        ) from exc
                    log.info("kafka log %s not ready, retrying: %s", self.topic, err)
                    if isinstance(err, EventLogRefusedError):
                        await wait_listening(self._bootstrap_servers, pause)
                    else:
                        await asyncio.sleep(pause)
                    backoff = min(backoff * 2, self.settings.retry_backoff_max_ms / 1000)
            self._started = True
            self._guard = asyncio.create_task(self._close_at_shutdown(), name=f"{self.topic}-guard")

    async def _close_at_shutdown(self) -> None:
        """Close the clients if the event loop shuts down before :meth:`close`.

        ``asyncio.run`` cancels every task at once when its coroutine returns; an
        aiokafka consumer that is still running may swallow that cancellation in its
        fetch task and hang the shutdown. This task is cancelled with the others and
        stops the clients, which cancels aiokafka's tasks a second time.
        """
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if not self._closed:
                log.warning("kafka log %s was not closed; closing it at loop shutdown", self.topic)
                self._closed = True
                await self._close_clients()
            raise

    async def _start_once(self) -> None:
        await probe_reachable(self._bootstrap_servers, timeout_ms=self.settings.request_timeout_ms)
        await probe_credentials(
            self._bootstrap_servers,
            self._security,
            client_id=self.settings.client_id,
            timeout_ms=self.settings.request_timeout_ms,
        )
        self._control = AIOKafkaClient(**self._client_kwargs())
        self._producer = AIOKafkaProducer(
            **self._client_kwargs(),
            acks="all",
            enable_idempotence=False,
            **self._producer_config,
        )
        self._fanout = KafkaFanout(
            self._new_consumer,
            self.topic,
            poll_timeout_ms=self.settings.poll_timeout_ms,
            max_buffered_batches=self.settings.max_buffered_batches,
            retry_backoff_ms=self.settings.retry_backoff_ms,
            access=Access(self._security.principal, "READ", self.topic),
        )
        # Each client's bootstrap is round trips of its own to a broker that may have
        # just started (a restarted broker's RLMM starts here, the broker's partitions
        # waiting on it): run them and the topic's check at once, not one after another.
        # None of them needs the topic to exist; every one ends before an error is raised,
        # so _close_clients finds each client started or not, never half way.
        outcomes = await asyncio.gather(
            self._ensure_topic(),
            self._control.bootstrap(),
            self._producer.start(),
            self._fanout.start(),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        if self.topic_created:
            # Apache Kafka makes a new topic's partitions leaders asynchronously: wait
            # until every one answers, so the first appends and reads do not bounce.
            await self._end_offsets_now(range(self._partitions))

    async def _ensure_topic(self) -> None:
        admin = AIOKafkaAdminClient(**self._client_kwargs())
        try:
            await admin.start()
            self.topic_created = await ensure_topic(
                admin,
                self.topic,
                self._partitions,
                self.replication_factor,
                {"retention.ms": str(self.retention_ms), "cleanup.policy": "delete"},
                create=self.create_topic,
                timeout_s=self.settings.request_timeout_ms / 1000,
                principal=self._security.principal,
            )
        finally:
            await admin.close()

    async def _close_clients(self) -> None:
        # Close in reverse order; each step runs even if an earlier one failed.
        fanout, producer, control = self._fanout, self._producer, self._control
        self._fanout = self._producer = self._control = None
        try:
            if fanout is not None:
                await fanout.close()
        finally:
            try:
                if producer is not None:
                    await producer.stop()
            finally:
                if control is not None:
                    await control.close()

    async def close(self) -> None:
        """End readers' iterations, flush and stop the producer, close clients. Idempotent."""
        if self._closed:
            return
        self._closed = True
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.cancel()
        async with self._start_lock:
            await self._close_clients()

    async def _ensure_started(self) -> None:
        if self._closed:
            raise EventLogClosedError(f"kafka log {self.topic} is closed")
        if not self._started:
            await self.start()

    # -- writes ---------------------------------------------------------------

    @staticmethod
    def _check_value(value: object, what: str) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidRecordError(f"{what}: value must be bytes, got {type(value).__name__}")
        return bytes(value)

    async def append(self, partition: int, value: bytes, key: bytes | None = None) -> int:
        self._check_partition(partition)
        data = self._check_value(value, f"append to {self.topic}-{partition}")
        if key is not None:
            key = self._check_value(key, f"append to {self.topic}-{partition} (key)")
        await self._ensure_started()

        async def attempt() -> int:
            producer = self._live_producer()
            future = await producer.send(self.topic, data, key=key, partition=partition)
            return int((await future).offset)

        return await self._with_retries(attempt, f"append to {self.topic}-{partition}", "WRITE")

    async def append_batch(self, partition: int, values: Sequence[bytes]) -> list[int]:
        self._check_partition(partition)
        what = f"append_batch of {len(values)} records to {self.topic}-{partition}"
        records = [self._check_value(v, what) for v in values]
        if not records:
            return []
        await self._ensure_started()

        async def attempt() -> list[int]:
            producer = self._live_producer()
            batch = self._build_batch(records, what)
            future = await producer.send_batch(batch, self.topic, partition=partition)
            base = int((await future).offset)
            return list(range(base, base + len(records)))

        return await self._with_retries(attempt, what, "WRITE")

    def _build_batch(self, records: list[bytes], what: str) -> BatchBuilder:
        """One record batch holding every record (all land or none do)."""
        codec = COMPRESSION_ATTRS[self._producer_config.get("compression_type")]
        batch = BatchBuilder(self.settings.max_request_size, codec)
        for i, value in enumerate(records):
            if batch.append(key=None, value=value, timestamp=None) is None:
                raise EventLogRecordTooLargeError(
                    f"{what}: record {i} does not fit; the batch exceeds max_request_size="
                    f"{self.settings.max_request_size} bytes"
                    f" ({sum(map(len, records))} bytes of values)"
                )
        batch.close()
        return batch

    def _live_producer(self) -> AIOKafkaProducer:
        if self._closed or self._producer is None:
            raise EventLogClosedError(f"kafka log {self.topic} is closed")
        return self._producer

    async def _with_retries(self, attempt: Any, what: str, operation: str) -> Any:
        """Run ``attempt`` until it succeeds, fails non-retriably, or delivery times out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.delivery_timeout_ms / 1000
        backoff = self.settings.retry_backoff_ms / 1000
        tries = 0
        while True:
            tries += 1
            try:
                return await attempt()
            except EventLogError:
                raise
            except Exception as exc:  # translated at this boundary
                raise_if_cancelling(exc)
                if self._closed:
                    raise EventLogClosedError(f"{what}: log closed during the call") from exc
                err = translate_error(
                    exc, what, Access(self._security.principal, operation, self.topic)
                )
                if not err.retriable:
                    raise err from exc
                if loop.time() + backoff >= deadline:
                    raise EventLogTransportError(
                        f"{what}: gave up after {tries} attempts in "
                        f"{self.settings.delivery_timeout_ms} ms: {err}",
                        retriable=True,
                    ) from exc
                # A broker that cannot be reached was named once (self.brokers): its
                # every attempt is not a warning of its own.
                log.log(
                    logging.DEBUG if isinstance(exc, UNREACHABLE) else logging.WARNING,
                    "%s failed (attempt %d), retrying: %s", what, tries, err,
                )  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.retry_backoff_max_ms / 1000)

    # -- reads ----------------------------------------------------------------

    async def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        wanted = list(partitions)
        for p in wanted:
            self._check_partition(p)
        await self._ensure_started()

        async def attempt() -> dict[int, int]:
            if self._control is None:
                raise EventLogClosedError(f"kafka log {self.topic} is closed")
            return await self._end_offsets_now(wanted)

        result: dict[int, int] = await self._with_retries(
            attempt, f"end offsets of {self.topic} partitions {sorted(set(wanted))}", "READ"
        )
        return {p: result[p] for p in wanted}

    async def _end_offsets_now(self, partitions: Iterable[int]) -> dict[int, int]:
        assert self._control is not None
        return await fetch_end_offsets(
            self._control,
            self.topic,
            partitions,
            timeout_s=self.settings.request_timeout_ms / 1000,
            backoff_s=self.settings.retry_backoff_ms / 1000 / 2,
            max_backoff_s=self.settings.retry_backoff_max_ms / 1000,
            principal=self._security.principal,
            brokers=self.brokers,
        )

    async def read_batches(
        self, partition: int, start_offset: int = 0
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        self._check_partition(partition)
        if isinstance(start_offset, bool) or not isinstance(start_offset, int) or start_offset < 0:
            raise InvalidOffsetError(
                f"read of {self.topic}-{partition}: start_offset must be an int >= 0, "
                f"got {start_offset!r}"
            )
        await self._ensure_started()
        fanout = self._fanout
        if fanout is None:
            raise EventLogClosedError(f"kafka log {self.topic} is closed")
        batches = fanout.read_batches(partition, start_offset)
        try:
            async for batch in batches:
                yield batch
        finally:
            await batches.aclose()


__all__ = [
    "BOOTSTRAP_PROPERTY",
    "DEFAULT_TOPIC",
    "UNREACHABLE",
    "BrokerReachability",
    "KafkaEventLog",
    "KafkaLogSettings",
]
