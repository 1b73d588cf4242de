"""run_restore: the archive's committed records into a live topic, exactly once across crashes.

Job: check the target against the plan (partition count, data already there, saved
progress and whose it is), create the target and the progress topic when absent, then
read the plan's slices (the archive's read_committed reader: aborted records and
control batches never come out) and append each record, with its key, value, headers
and CreateTime timestamp, to a batch of its target partition, sent through one
transactional producer whose ``transactional_id`` is derived from the restore's
identity.

Invariants:
- every transaction holds records of one source partition and, last, that partition's
  progress record (the next source offset to read): data and position commit together
  or not at all, so a run killed at any instant and resumed writes each record once;
- starting the producer fences any earlier run of the same restore (same
  transactional id) and aborts its open transaction before progress is read;
- every bad input is found before anything is written (RestoreInputError);
- within a source partition records are produced in offset order to one target
  partition (identity), or to the partition Kafka's murmur2 gives their key: the
  relative order of records sharing a key is kept either way;
- the producer and every reader stream opened are closed before the call returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder

from rlmm.archive import read_slice
from rlmm.restore.errors import (
    MissingSegmentsError,
    PartitionCountMismatchError,
    ResumeMismatchError,
    TargetClusterError,
    TargetNotEmptyError,
)
from rlmm.restore.partitioner import murmur2_partition
from rlmm.restore.plan import IDENTITY, PartitionPlan, RestorePlan
from rlmm.restore.progress import (
    PROGRESS_TOPIC,
    Progress,
    now_ms,
    progress_key,
    read_progress,
)
from rlmm.restore.target import TargetCluster

log = logging.getLogger(__name__)
_LOG_APPEND_TIME = 1
# What the progress topic keeps: the newest record per key.
_PROGRESS_CONFIGS = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}

# partition, offsets done, offsets in this run, records written, bytes read
ProgressCallback = Callable[[int, int, int, int, int], None]


@dataclass(frozen=True)
class RestoreOptions:
    resume: bool = False
    dry_run: bool = False
    progress_topic: str = PROGRESS_TOPIC
    transaction_records: int = 10_000  # records per transaction (one partition's)


@dataclass
class PartitionResult:
    """What one run did for one source partition."""

    partition: int
    start_offset: int
    next_offset: int
    end_offset: int
    records: int = 0  # this run
    records_total: int = 0  # every run so far
    bytes_read: int = 0
    log_append_time_records: int = 0
    transactions: int = 0

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end_offset

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "start_offset": self.start_offset,
            "next_offset": self.next_offset,
            "end_offset": self.end_offset,
            "records": self.records,
            "records_total": self.records_total,
            "bytes_read": self.bytes_read,
            "log_append_time_records": self.log_append_time_records,
            "transactions": self.transactions,
            "done": self.done,
        }


@dataclass
class RestoreReport:
    """The result of one run (or of a dry run: nothing written, ``results`` empty)."""

    plan: RestorePlan
    target_partition_count: int
    target_exists: bool
    transactional_id: str
    progress_topic: str
    dry_run: bool = False
    resumed: bool = False
    created_target: bool = False
    # Source partitions whose void progress (a target deleted or emptied since) is
    # cleared before this run writes.
    cleared_progress: list[int] = field(default_factory=list)
    results: list[PartitionResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def records(self) -> int:
        return sum(r.records for r in self.results)

    @property
    def log_append_time_records(self) -> int:
        return sum(r.log_append_time_records for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "plan": self.plan.to_dict(self.target_partition_count),
            "target_exists": self.target_exists,
            "transactional_id": self.transactional_id,
            "progress_topic": self.progress_topic,
        }
        if not self.dry_run:
            out |= {
                "resumed": self.resumed,
                "created_target": self.created_target,
                "cleared_progress": self.cleared_progress,
                "records": self.records,
                "log_append_time_records": self.log_append_time_records,
                "elapsed_s": round(self.elapsed_s, 3),
                "records_per_s": round(self.records / self.elapsed_s, 1)
                if self.elapsed_s > 0
                else None,
                "partitions": [r.to_dict() for r in self.results],
                "done": all(r.done for r in self.results),
            }
        return out


def transactional_id(plan: RestorePlan) -> str:
    """One id per (source topic id, target topic): a rerun fences the run before it."""
    digest = hashlib.sha256(f"{plan.topic_id}|{plan.target_topic}".encode()).hexdigest()
    return f"rlmm-restore-{plan.target_topic}-{digest[:12]}"


def _source_text(plan: RestorePlan, p: PartitionPlan) -> str:
    return (
        f"{plan.source_topic}-{p.source.partition} (topic id {plan.topic_id}), offsets"
        f" [{p.first_offset}, {p.end_offset}), partitioner {plan.selection.partitioner}"
    )


def _check_saved(plan: RestorePlan, saved: Mapping[int, Progress], options: RestoreOptions) -> None:
    target = plan.target_topic
    if not options.resume:
        done = sum(1 for s in saved.values() if s.done)
        first = saved[min(saved)]
        raise TargetNotEmptyError(
            f"target topic {target!r} holds a restore of {first.source_topic!r} (progress of"
            f" {len(saved)} partitions in {options.progress_topic!r}, {done} done): pass"
            " --resume to continue it, or restore into another topic"
        )
    by_partition = {p.source.partition: p for p in plan.partitions}
    for partition, progress in sorted(saved.items()):
        mine = by_partition.get(partition)
        ours = (
            mine is not None
            and progress.source_topic == plan.source_topic
            and progress.topic_id == plan.topic_id
            and progress.partitioner == plan.selection.partitioner
            and progress.first_offset == mine.first_offset
            and progress.end_offset == mine.end_offset
        )
        if not ours:
            this = (
                _source_text(plan, mine)
                if mine is not None
                else f"{plan.source_topic} (topic id {plan.topic_id}) without partition {partition}"
            )
            raise ResumeMismatchError(
                f"--resume: the progress saved for target topic {target!r} is of"
                f" {progress.source_text()}, not of {this}: refusing to mix two sources"
            )


async def _prepare(
    plan_for: Callable[[Mapping[int, int] | None], RestorePlan],
    cluster: TargetCluster,
    options: RestoreOptions,
) -> tuple[RestoreReport, dict[int, Progress]]:
    """Every check before anything is written; the report of the (resumed) plan."""
    plan = await asyncio.to_thread(plan_for, None)
    target = plan.target_topic
    counts = await cluster.partition_counts()
    target_count = counts.get(target)
    if (
        target_count is not None
        and plan.selection.partitioner == IDENTITY
        and target_count != plan.source_partition_count
    ):
        raise PartitionCountMismatchError(
            f"target topic {target!r} has {target_count} partitions, the source"
            f" {plan.source_topic!r} {plan.source_partition_count}: pass --partitioner murmur2"
            " to spread the records by key, or restore into a new topic"
        )
    saved: dict[int, Progress] = {}
    stale: dict[int, Progress] = {}
    size = counts.get(options.progress_topic, 0)
    if target_count is None:
        # Progress into a topic that is gone (deleted since): void, cleared before
        # the first record, so that a crash of this run cannot resume from it.
        stale = await read_progress(cluster.client, target, size, topic=options.progress_topic)
    else:
        saved = await read_progress(cluster.client, target, size, topic=options.progress_topic)
        found = await cluster.committed_record(target, target_count)
        if saved and found is None:
            # Progress, but no committed record in the target: it was deleted and
            # recreated (or only aborted records were restored). Nothing can be doubled
            # by starting over, and resuming would skip what the progress claims.
            stale, saved = saved, {}
        elif saved:
            _check_saved(plan, saved, options)
        elif found is not None:
            raise TargetNotEmptyError(
                f"target topic {target!r} already holds data (partition {found[0]} offset"
                f" {found[1]}) that no restore wrote: restore into a new or empty topic"
            )
    if saved:
        plan = await asyncio.to_thread(plan_for, {p: s.next_offset for p, s in saved.items()})
    report = RestoreReport(
        plan=plan,
        target_partition_count=target_count or plan.source_partition_count,
        target_exists=target_count is not None,
        transactional_id=transactional_id(plan),
        progress_topic=options.progress_topic,
        dry_run=options.dry_run,
        resumed=bool(saved),
        cleared_progress=sorted(stale),
    )
    return report, saved


async def run_restore(
    plan_for: Callable[[Mapping[int, int] | None], RestorePlan],
    client: Mapping[str, Any],
    options: RestoreOptions | None = None,
    on_progress: ProgressCallback | None = None,
) -> RestoreReport:
    """Plan (``plan_for(resume_points)``), check, then restore; see the module doc.

    Raises RestoreInputError before writing anything, MissingSegmentsError after
    committing everything up to a gap (``skip_missing`` false)."""
    options = options or RestoreOptions()
    started = time.monotonic()
    async with TargetCluster(client) as cluster:
        report, saved = await _prepare(plan_for, cluster, options)
        if options.dry_run:
            return report
        plan = report.plan
        if not report.target_exists:
            report.created_target = await cluster.create_topic(
                plan.target_topic, plan.source_partition_count
            )
        if options.progress_topic not in await cluster.partition_counts():
            await cluster.create_topic(options.progress_topic, 1, _PROGRESS_CONFIGS)
    writer = _Writer(report, dict(client), options, saved, on_progress)
    try:
        await writer.run()
    finally:
        report.elapsed_s = time.monotonic() - started
    stopped = [p for p in plan.partitions if p.stop_gap is not None]
    if stopped:
        p = stopped[0]
        gap = p.stop_gap
        assert gap is not None
        raise MissingSegmentsError(
            f"{plan.source_topic}-{p.source.partition}: offsets [{gap.first_offset},"
            f" {gap.last_offset + 1}) are missing from the archive; the restore stopped there"
            f" (offsets before it are committed in {plan.target_topic!r}). Run again with"
            " --resume --skip-missing to go on past the gap",
            plan.source_topic,
            p.source.partition,
            gap.first_offset,
            gap.last_offset,
        )
    return report


class _Writer:
    """One run's transactional producer over the plan's partitions, one at a time."""

    def __init__(
        self,
        report: RestoreReport,
        client: dict[str, Any],
        options: RestoreOptions,
        saved: Mapping[int, Progress],
        on_progress: ProgressCallback | None,
    ) -> None:
        self.report = report
        self.plan = report.plan
        self.options = options
        self.saved = saved
        self.on_progress = on_progress
        self._builders: dict[int, BatchBuilder] = {}  # target partition -> open batch
        self._in_txn = 0  # records in the open transaction
        self.producer = AIOKafkaProducer(
            **client,
            client_id="rlmm-restore",
            transactional_id=report.transactional_id,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
        )

    async def run(self) -> None:
        try:
            # Fences an earlier run of this restore and aborts its open transaction.
            await self.producer.start()
        except KafkaError as e:
            await self.producer.stop()
            raise TargetClusterError(
                f"cannot start the transactional producer {self.report.transactional_id!r}: {e}"
            ) from e
        try:
            if self.report.cleared_progress:
                await self._clear(self.report.cleared_progress)
            for p in self.plan.partitions:
                await self._partition(p)
        except KafkaError as e:
            raise TargetClusterError(f"restoring into {self.plan.target_topic!r}: {e}") from e
        finally:
            await self.producer.stop()

    async def _partition(self, p: PartitionPlan) -> None:
        previous = self.saved.get(p.source.partition)
        result = PartitionResult(
            p.source.partition, p.start_offset, p.start_offset, p.end_offset,
            records_total=previous.records if previous is not None else 0,
        )  # fmt: skip
        self.report.results.append(result)
        if p.start_offset >= p.run_end:
            return
        pending: list[asyncio.Future[Any]] = []
        total = max(1, p.run_end - p.start_offset)
        await self.producer.begin_transaction()
        self._report(result, total)
        try:
            for piece in p.slices:
                result.bytes_read += piece.size_in_bytes
                stream = _rows(piece)
                try:
                    # Fetching and decoding block: off the loop, so the producer's
                    # sender keeps sending meanwhile.
                    while (rows := await asyncio.to_thread(next, stream, None)) is not None:
                        await self._send_rows(p, result, rows, pending, total)
                finally:
                    stream.close()
                # Offsets after the slice's last record (aborted ones, markers) are done.
                result.next_offset = max(result.next_offset, piece.until_offset)
            result.next_offset = max(result.next_offset, p.run_end)
            await self._commit(p, result, pending)
            self._report(result, total)
        except BaseException:
            # Unsent or unacknowledged records of the open transaction: never
            # committed (its abort, or the next run's fencing, drops them).
            for future in pending:
                future.cancel()
            raise

    async def _clear(self, partitions: list[int]) -> None:
        """Tombstones for void progress, committed before any record is written."""
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
        await asyncio.gather(*pending)
        await self.producer.commit_transaction()

    async def _send_rows(
        self,
        p: PartitionPlan,
        result: PartitionResult,
        rows: list[Row],
        pending: list[asyncio.Future[Any]],
        total: int,
    ) -> None:
        count = self.report.target_partition_count
        identity = self.plan.selection.partitioner == IDENTITY
        source = p.source.partition
        for offset, key, value, ts, ts_type, headers in rows:
            partition = source if identity else murmur2_partition(key, count, source)
            builder = self._builders.get(partition)
            if builder is None:
                builder = self._builders[partition] = self.producer.create_batch()
            # Appending to a batch of our own costs a fraction of a send() per record
            # (no future, no accumulator lookup); the builder takes Kafka's ms.
            timestamp = ts if ts >= 0 else None
            if builder.append(timestamp=timestamp, key=key, value=value, headers=headers) is None:
                await self._flush(partition, pending)
                builder = self._builders[partition] = self.producer.create_batch()
                if (
                    builder.append(timestamp=timestamp, key=key, value=value, headers=headers)
                    is None
                ):
                    raise TargetClusterError(
                        f"{self.plan.source_topic}-{source} offset {offset}: the record does"
                        " not fit in one batch of the producer (max_batch_size)"
                    )
            self._in_txn += 1
            result.records += 1
            result.records_total += 1
            result.log_append_time_records += ts_type == _LOG_APPEND_TIME
            result.next_offset = offset + 1
            if self._in_txn >= self.options.transaction_records:
                await self._commit(p, result, pending)
                pending.clear()
                await self.producer.begin_transaction()
                self._report(result, total)

    async def _flush(self, partition: int, pending: list[asyncio.Future[Any]]) -> None:
        builder = self._builders.pop(partition, None)
        if builder is not None and builder.record_count():
            pending.append(
                await self.producer.send_batch(builder, self.plan.target_topic, partition=partition)
            )

    async def _commit(
        self, p: PartitionPlan, result: PartitionResult, pending: list[asyncio.Future[Any]]
    ) -> None:
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
        for partition in list(self._builders):
            await self._flush(partition, pending)
        pending.append(
            await self.producer.send(
                self.options.progress_topic, progress.value(), key=progress.key, partition=0
            )
        )
        await asyncio.gather(*pending)
        await self.producer.commit_transaction()
        self._in_txn = 0
        result.transactions += 1

    def _report(self, result: PartitionResult, total: int) -> None:
        if self.on_progress is not None:
            done = min(total, result.next_offset - result.start_offset)
            self.on_progress(result.partition, done, total, result.records, result.bytes_read)


Row = tuple[int, bytes | None, bytes | None, int, int, list[tuple[str, bytes | None]]]


def _rows(piece: Any) -> Generator[list[Row], None, None]:
    """The slice's records, a decoded Arrow batch at a time."""
    for batch in read_slice(piece):
        yield _batch_rows(batch)


def _batch_rows(batch: pa.RecordBatch) -> list[Row]:
    millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    headers = [
        [] if hs is None else [(h["key"], h["value"]) for h in hs]
        for hs in batch.column("headers").to_pylist()
    ]
    return list(
        zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            millis,
            batch.column("timestampType").to_pylist(),
            headers,
            strict=True,
        )
    )


__all__ = [
    "PartitionResult",
    "ProgressCallback",
    "RestoreOptions",
    "RestoreReport",
    "run_restore",
    "transactional_id",
]
