"""One shared aiokafka consumer serving every reader of a KafkaEventLog.

Job: readers register ``(partition, start_offset)``; one background task fetches
all partitions that have readers (manual assignment, no consumer group, no
committed offsets) and fans each fetched batch out into the readers' queues.

Invariant: every reader receives each record with ``offset >= its next offset``
exactly once, in offset order. The consumer's position on a partition is never
past the smallest next offset of that partition's readers at assignment time: a
new reader that starts earlier seeks the partition back, and readers that are
already past the re-read records drop them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from eventlog._cancellation import raise_if_cancelling
from eventlog._kafka_admin import Access, translate_error
from eventlog.errors import EventLogClosedError, EventLogError

log = logging.getLogger(__name__)

_Batch = list[tuple[int, bytes]]


class _Reader:
    """One reader's state: its next wanted offset and its queue of batches."""

    def __init__(self, partition: int, start_offset: int) -> None:
        self.partition = partition
        self.next_offset = start_offset
        # Items: a batch, an error to raise, or None = end of iteration.
        self.queue: asyncio.Queue[_Batch | EventLogError | None] = asyncio.Queue()


class KafkaFanout:
    """Shared manual-assignment consumer with per-reader queues and backpressure.

    A partition is paused while any of its readers holds ``max_buffered_batches``
    unread batches, so one slow reader bounds memory without stalling the others'
    partitions.
    """

    def __init__(
        self,
        consumer_factory: Callable[[], AIOKafkaConsumer],
        topic: str,
        *,
        poll_timeout_ms: int = 500,
        max_buffered_batches: int = 16,
        retry_backoff_ms: int = 100,
        access: Access | None = None,
    ) -> None:
        self._access = access  # who reads: a denial names the principal
        self._consumer_factory = consumer_factory
        self._topic = topic
        self._poll_timeout_ms = poll_timeout_ms
        self._max_buffered = max_buffered_batches
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._readers: dict[int, set[_Reader]] = {}
        # Next offset the dispatcher will hand out per partition (position it has
        # delivered up to); used to decide whether a new reader needs a seek back.
        self._delivered: dict[int, int] = {}
        self._paused: set[int] = set()
        self._wakeup = asyncio.Event()
        self._closed = False

    async def start(self) -> None:
        if self._consumer is not None:
            return
        consumer = self._consumer_factory()
        try:
            await consumer.start()
        except BaseException:
            # a start that failed (or was cancelled) half way still holds a client
            with contextlib.suppress(Exception):
                await consumer.stop()
            raise
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name=f"kafka-fanout-{self._topic}")

    async def close(self) -> None:
        """Stop fetching, end every reader's iteration, close the consumer."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for readers in self._readers.values():
            for reader in readers:
                reader.queue.put_nowait(None)
        self._readers.clear()
        if self._consumer is not None:
            await self._consumer.stop()

    async def read_batches(self, partition: int, start_offset: int) -> AsyncGenerator[_Batch, None]:
        """Batches of ``(offset, value)`` from ``start_offset`` on, following live appends."""
        if self._closed:
            raise EventLogClosedError(f"kafka log {self._topic} is closed")
        reader = _Reader(partition, start_offset)
        self._attach(reader)
        try:
            while True:
                item = await reader.queue.get()
                if item is None:
                    return
                if isinstance(item, EventLogError):
                    raise item
                self._maybe_resume(partition)
                yield item
        finally:
            self._detach(reader)

    # -- assignment ---------------------------------------------------------

    def _attach(self, reader: _Reader) -> None:
        assert self._consumer is not None
        partition = reader.partition
        readers = self._readers.setdefault(partition, set())
        readers.add(reader)
        if len(readers) == 1:
            self._delivered[partition] = reader.next_offset
            self._reassign()
        elif reader.next_offset < self._delivered[partition]:
            # Re-read from the new reader's start; the others skip what they had.
            self._delivered[partition] = reader.next_offset
            self._consumer.seek(TopicPartition(self._topic, partition), reader.next_offset)
        self._wakeup.set()

    def _detach(self, reader: _Reader) -> None:
        readers = self._readers.get(reader.partition)
        if readers is None or reader not in readers:
            return
        readers.discard(reader)
        if not readers:
            del self._readers[reader.partition]
            self._delivered.pop(reader.partition, None)
            self._paused.discard(reader.partition)
            if not self._closed:
                self._reassign()
        else:
            self._maybe_resume(reader.partition)

    def _reassign(self) -> None:
        """Assign exactly the partitions with readers; seek each to its delivered position.

        ``assign`` replaces the whole assignment and forgets positions, so every
        partition is seeked again (no await in between: the fetch task never sees
        a partition without a position).
        """
        consumer = self._consumer
        assert consumer is not None
        tps = [TopicPartition(self._topic, p) for p in sorted(self._readers)]
        if not tps:
            consumer.unsubscribe()
            return
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, self._delivered[tp.partition])
        paused = [TopicPartition(self._topic, p) for p in self._paused]
        if paused:
            consumer.pause(*paused)

    # -- fetch loop ---------------------------------------------------------

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            if not self._readers:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                data = await consumer.getmany(timeout_ms=self._poll_timeout_ms)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # translated and routed to readers
                raise_if_cancelling(exc)
                err = translate_error(exc, f"read topic {self._topic}", self._access)
                if err.retriable:
                    log.warning("fetch from %s failed, retrying: %s", self._topic, err)
                    await asyncio.sleep(self._retry_backoff_s)
                    continue
                log.error("fetch from %s failed: %s", self._topic, err)
                self._fail_all(err)
                continue
            for tp, messages in data.items():
                if messages:
                    self._dispatch(tp.partition, [(m.offset, m.value or b"") for m in messages])

    def _dispatch(self, partition: int, records: _Batch) -> None:
        readers = self._readers.get(partition)
        if not readers:
            return
        for reader in readers:
            if records[-1][0] < reader.next_offset:
                continue
            if records[0][0] >= reader.next_offset:
                # Common case: whole batch. Readers own their list, so copy if shared.
                batch = records if len(readers) == 1 else list(records)
            else:
                batch = [r for r in records if r[0] >= reader.next_offset]
            reader.next_offset = batch[-1][0] + 1
            reader.queue.put_nowait(batch)
            if reader.queue.qsize() >= self._max_buffered and partition not in self._paused:
                self._paused.add(partition)
                assert self._consumer is not None
                self._consumer.pause(TopicPartition(self._topic, partition))
        self._delivered[partition] = max(self._delivered[partition], records[-1][0] + 1)

    def _maybe_resume(self, partition: int) -> None:
        if partition not in self._paused:
            return
        readers = self._readers.get(partition, set())
        if all(r.queue.qsize() < self._max_buffered // 2 for r in readers):
            self._paused.discard(partition)
            if self._consumer is not None and not self._closed:
                self._consumer.resume(TopicPartition(self._topic, partition))

    def _fail_all(self, err: EventLogError) -> None:
        """A non-retriable fetch error ends every current reader with that error."""
        for partition, readers in list(self._readers.items()):
            for reader in readers:
                reader.queue.put_nowait(err)
            del self._readers[partition]
            self._delivered.pop(partition, None)
        self._paused.clear()
        assert self._consumer is not None
        self._consumer.unsubscribe()

    @property
    def reader_count(self) -> int:
        return sum(len(r) for r in self._readers.values())

    def _debug_state(self) -> dict[str, Any]:
        return {"delivered": dict(self._delivered), "paused": sorted(self._paused)}
