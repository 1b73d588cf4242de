"""The restore's transactional writer: records, the offset map and progress, committed together.

Job: one run's transactional producer into the target cluster. It opens a transaction
at the first thing it is given; sends archived batches whole (``passthrough``) and
appends re-encoded records to batches of its own, one open batch per target partition
(``rows``: by identity, or by Kafka's murmur2 of the key); notes positions that move
past offsets with no record (``moved``); and commits once the transaction holds
``transaction_records`` records, or when asked (``finish``). Before the first record
it clears void progress and a void offset map (``clear_void``).

Invariants:
- every transaction holds records of one or more source partitions, then the offset
  map of where they went (``rlmm.restore.offset_map``, identity only) and, last, one
  progress record (the next source offset to read) for each source partition whose
  position it moves: data, map and position commit together or not at all, so a run
  killed at any instant and resumed writes each record once, and its map once;
- within a source partition records go out in the order given, to one target
  partition (identity) or to the partition murmur2 gives their key; a passed-through
  batch goes after the records re-encoded before it (their batch is sent first);
- the producer is stopped when the writer is left (``async with``), and sends of a
  transaction not committed are cancelled first: they never commit (stopping aborts
  the transaction, or the next run's fencing drops it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata

from rlmm.restore.errors import TargetClusterError
from rlmm.restore.offset_map import MapBuilder, map_prefix
from rlmm.restore.partitioner import murmur2_partition
from rlmm.restore.plan import IDENTITY, PartitionPlan
from rlmm.restore.progress import Progress, now_ms, progress_key, read_committed_keys
from rlmm.restore.raw_batch import RawBatch
from rlmm.restore.report import PartitionResult, RestoreOptions, RestoreReport
from rlmm.restore.source import Passthrough, Row

_LOG_APPEND_TIME = 1
# With murmur2 every target partition may have a batch open: aiokafka's default size.
_MURMUR2_BATCH_BYTES = 16_384

# Called for each source partition a commit moved, after the commit.
OnCommit = Callable[[PartitionPlan, PartitionResult], None]


class TransactionWriter:
    """One run's transactional producer (``async with`` starts and stops it)."""

    def __init__(
        self,
        report: RestoreReport,
        client: dict[str, Any],
        options: RestoreOptions,
        max_bytes: int,
        on_commit: OnCommit,
        map_partitions: int = 0,
    ) -> None:
        self.report = report
        self.plan = report.plan
        self.client = client
        self.options = options
        self.on_commit = on_commit
        self._builders: dict[int, BatchBuilder] = {}  # target partition -> open batch
        # sends of the open transaction
        self._pending: list[asyncio.Future[RecordMetadata]] = []
        self._open = False  # a transaction is open
        self._in_txn = 0  # records in the open transaction
        # Source partitions whose position moved in the open transaction.
        self._touched: dict[int, tuple[PartitionPlan, PartitionResult]] = {}
        plan = report.plan
        # Where each source offset goes (identity only: murmur2 spreads a partition's
        # records over every target partition, no offset of one stands for them).
        self._map = (
            MapBuilder(plan.target_topic, plan.source_topic, plan.topic_id)
            if report.offsets_topic
            else None
        )
        self.map_partitions = map_partitions  # of the offsets topic (to clear a void map)
        self.producer = AIOKafkaProducer(
            **client,
            client_id="rlmm-restore",
            transactional_id=report.transactional_id,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            # Re-encoded batches as large as archived ones may be (the target's limit),
            # but for murmur2, which may keep a batch open in every target partition.
            max_batch_size=max_bytes
            if report.plan.selection.partitioner == IDENTITY
            else _MURMUR2_BATCH_BYTES,
        )

    async def __aenter__(self) -> Self:
        try:
            # Fences an earlier run of this restore and aborts its open transaction.
            await self.producer.start()
        except KafkaError as e:
            await self.producer.stop()
            raise TargetClusterError(
                f"cannot start the transactional producer {self.report.transactional_id!r}: {e}"
            ) from e
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Unsent or unacknowledged records of the open transaction: never
        # committed (stopping aborts it, or the next run's fencing drops them).
        for future in self._pending:
            future.cancel()
        await self.producer.stop()

    async def clear_void(self) -> None:
        """Clear the progress the report calls void and, for a restore that starts
        over (no progress of its own), a map of the target left by an earlier one
        (into a topic deleted since): both void, committed away before any record."""
        void = [] if self.report.resumed or self._map is None else await self._void_map()
        if self.report.cleared_progress or void:
            await self._clear(self.report.cleared_progress, void)

    async def passthrough(
        self, p: PartitionPlan, result: PartitionResult, step: Passthrough
    ) -> None:
        """An archived batch of ``p``, sent as it is."""
        if not self._open:
            await self._begin()
        source = p.source.partition
        self._touched[source] = (p, result)
        await self._flush(source)  # records re-encoded before it go first
        sent = await self.producer.send_batch(
            RawBatch(step.header, step.data), self.plan.target_topic, partition=source
        )
        self._pending.append(sent)
        count = step.header.record_count
        if self._map is not None:
            self._map.batch(source, sent, step.header.base_offset, step.header.last_offset, count)
        result.records += count
        result.records_total += count
        result.batches_passed_through += 1
        result.next_offset = step.header.last_offset + 1
        self._in_txn += count
        if self._in_txn >= self.options.transaction_records:
            await self._commit()

    async def moved(self, p: PartitionPlan, result: PartitionResult, offset: int) -> None:
        """The partition is done below ``offset``: its next commit says so."""
        if offset > result.next_offset:
            result.next_offset = offset
            if not self._open:
                await self._begin()
            self._touched[p.source.partition] = (p, result)

    async def rows(self, p: PartitionPlan, result: PartitionResult, rows: list[Row]) -> None:
        """Records of ``p``, appended to batches of the producer's own."""
        count = self.report.target_partition_count
        identity = self.plan.selection.partitioner == IDENTITY
        source = p.source.partition
        touched, entry = self._touched, (p, result)
        for offset, key, value, ts, ts_type, headers in rows:
            if not self._open:
                await self._begin()
            touched[source] = entry
            partition = source if identity else murmur2_partition(key, count, source)
            builder = self._builders.get(partition)
            if builder is None:
                builder = self._builders[partition] = self.producer.create_batch()
            # Appending to a batch of our own costs a fraction of a send() per record
            # (no future, no accumulator lookup); the builder takes Kafka's ms.
            timestamp = ts if ts >= 0 else None
            if builder.append(timestamp=timestamp, key=key, value=value, headers=headers) is None:
                await self._flush(partition)
                builder = self._builders[partition] = self.producer.create_batch()
                if (
                    builder.append(timestamp=timestamp, key=key, value=value, headers=headers)
                    is None
                ):
                    raise TargetClusterError(
                        f"{self.plan.source_topic}-{source} offset {offset}: the record does"
                        " not fit in one batch of the producer (max_batch_size)"
                    )
            if self._map is not None:
                self._map.row(partition, offset)
            self._in_txn += 1
            result.records += 1
            result.records_total += 1
            result.log_append_time_records += ts_type == _LOG_APPEND_TIME
            result.next_offset = offset + 1
            if self._in_txn >= self.options.transaction_records:
                await self._commit()

    async def finish(self) -> None:
        """Commit the open transaction, if one is open."""
        if self._open:
            await self._commit()

    async def _begin(self) -> None:
        await self.producer.begin_transaction()
        self._open = True

    async def _void_map(self) -> list[bytes]:
        """The keys of the target's committed map (read before this run writes one)."""
        found = await read_committed_keys(
            self.client, self.report.offsets_topic, self.map_partitions,
            map_prefix(self.plan.target_topic), what="the offset map",
        )  # fmt: skip
        return sorted(found)

    async def _clear(self, partitions: list[int], map_keys: list[bytes]) -> None:
        """Tombstones for void progress and a void map, committed before any record."""
        await self.producer.begin_transaction()
        pending = [
            await self.producer.send(
                self.options.progress_topic,
                None,
                key=progress_key(self.plan.target_topic, partition),
                partition=0,
            )
            for partition in partitions
        ]
        pending += [
            await self.producer.send(self.report.offsets_topic, None, key=key, partition=0)
            for key in map_keys
        ]
        await asyncio.gather(*pending)
        await self.producer.commit_transaction()

    async def _flush(self, partition: int) -> None:
        builder = self._builders.pop(partition, None)
        if builder is not None and builder.record_count():
            sent = await self.producer.send_batch(
                builder, self.plan.target_topic, partition=partition
            )
            self._pending.append(sent)
            if self._map is not None:
                self._map.sent(partition, sent)

    async def _commit(self) -> None:
        """Every open batch, then the map of where they went, then each touched
        partition's progress; commit."""
        for partition in list(self._builders):
            await self._flush(partition)
        if self._map is not None:
            # The target offsets are the sends' base offsets: known once acknowledged.
            await asyncio.gather(*self._pending)
            for record in self._map.records():
                self._pending.append(
                    await self.producer.send(
                        self.report.offsets_topic, record.value(), key=record.key, partition=0
                    )
                )
        for p, result in self._touched.values():
            progress = Progress(
                target_topic=self.plan.target_topic,
                source_partition=p.source.partition,
                source_topic=self.plan.source_topic,
                topic_id=self.plan.topic_id,
                partitioner=self.plan.selection.partitioner,
                first_offset=p.first_offset,
                end_offset=p.end_offset,
                next_offset=result.next_offset,
                records=result.records_total,
                updated_ms=now_ms(),
            )
            self._pending.append(
                await self.producer.send(
                    self.options.progress_topic, progress.value(), key=progress.key, partition=0
                )
            )
        await asyncio.gather(*self._pending)
        await self.producer.commit_transaction()
        self._pending.clear()
        self._open = False
        self._in_txn = 0
        for p, result in self._touched.values():
            result.transactions += 1
            self.on_commit(p, result)
        self._touched.clear()


__all__ = ["OnCommit", "TransactionWriter"]
