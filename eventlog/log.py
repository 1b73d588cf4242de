"""The EventLog ABC: a partitioned, durable, append-only log of opaque byte records.

This is the event log's base module: every backend (``file``, ``kafka``, ``memory``)
subclasses it, and it imports none of them.

Invariant: offsets are per partition, dense and start at 0; an offset returned by
``append``/``append_batch`` is durable (per the backend's policy) and will be
delivered by ``read`` with identical bytes, in offset order, to every reader.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar


class EventLog(ABC):
    """A partitioned event log. Backends: file (embedded), kafka, memory.

    ``eventlog.registry`` names each backend's class and builds the configured one with
    ``from_options``.
    """

    # Settings ``from_options`` takes besides the constructor's arguments (with the
    # default ``options``).
    extra_options: ClassVar[frozenset[str]] = frozenset()

    # ---- what the log can do: rlmm asks these, never the type's name ----
    # Processes on several hosts read and write the one log (the brokers of a cluster
    # share it): what a replicated cluster's sidecars need.
    shared: ClassVar[bool] = False
    # The setting naming the directory on this host that holds the log: rlmm defaults
    # it under its data_dir, and a reader checks it exists before opening the log.
    directory_option: ClassVar[str | None] = None
    # The log is a topic of a Kafka cluster: Kafka's client properties (rlmm's
    # ``kafka_properties``) configure it, and its ``bootstrap_servers`` name the cluster.
    kafka_client: ClassVar[bool] = False

    @classmethod
    def options(cls) -> dict[str, Any]:
        """The settings a configuration can give this type (``type`` aside), each with
        its default (``inspect.Parameter.empty`` for one without): rlmm's config check
        and the docs read them through ``eventlog.registry.known_options``. By default
        the constructor's named parameters plus ``extra_options``; a backend whose
        settings are not its constructor's arguments (KafkaEventLog's settings object)
        overrides it, with a ``from_options`` that takes them."""
        import inspect

        params = inspect.signature(cls).parameters.values()
        variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        named = {p.name: p.default for p in params if p.name != "self" and p.kind not in variadic}
        return {**named, **dict.fromkeys(cls.extra_options, inspect.Parameter.empty)}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> EventLog:
        """A log from configuration settings (``type`` removed): by default the
        constructor's keyword arguments."""
        return cls(**options)

    @classmethod
    def read_only_options(
        cls, options: Mapping[str, Any], *, wait_ms: int
    ) -> dict[str, Any] | None:
        """The settings that open this log in another process to read it, changing
        nothing (``wait_ms``: how long to wait for a server that does not answer); None
        when no other process can read it (the default: a log in this process only)."""
        return None

    @classmethod
    def log_start_offsets(cls, options: Mapping[str, Any]) -> dict[int, int]:
        """Each partition's first retained offset, read without opening the log
        (readers check a snapshot covers the partitions that no longer start at 0);
        empty when the log cannot tell without opening it."""
        return {}

    @property
    @abstractmethod
    def partition_count(self) -> int:
        """Number of partitions; fixed for the life of the log."""

    async def start(self) -> None:  # noqa: B027 - optional hook, most backends need none
        """Connect / open resources. Idempotent. ``async with`` calls it."""

    @abstractmethod
    async def append(self, partition: int, value: bytes, key: bytes | None = None) -> int:
        """Append one record; return its offset once it is durable."""

    @abstractmethod
    async def append_batch(self, partition: int, values: Sequence[bytes]) -> list[int]:
        """Append records to one partition atomically in order; return their offsets."""

    @abstractmethod
    async def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """Log end offset (offset the next append will get) of each partition."""

    @abstractmethod
    def read_batches(
        self, partition: int, start_offset: int = 0
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Yield non-empty lists of ``(offset, value)`` from ``start_offset`` on.

        Replays the backlog, then follows live appends forever (until the consumer
        stops iterating or the log is closed, which ends the iteration).
        """

    async def read(self, partition: int, start_offset: int = 0) -> AsyncIterator[tuple[int, bytes]]:
        """``(offset, value)`` one at a time: the flattened :meth:`read_batches`."""
        batches = self.read_batches(partition, start_offset)
        try:
            async for batch in batches:
                for record in batch:
                    yield record
        finally:
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                await aclose()

    @abstractmethod
    async def close(self) -> None:
        """Release resources; idempotent. Pending readers end their iteration."""

    async def __aenter__(self) -> EventLog:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _check_partition(self, partition: int) -> None:
        from eventlog.errors import UnknownPartitionError

        if isinstance(partition, bool) or not isinstance(partition, int):
            raise UnknownPartitionError(f"partition must be an int, got {partition!r}")
        if not 0 <= partition < self.partition_count:
            raise UnknownPartitionError(
                f"partition {partition} out of range [0, {self.partition_count})"
            )
