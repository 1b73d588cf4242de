"""run_restore: the archive's committed records into a live topic, exactly once across crashes.

Job: check the target against the plan (partition count, data already there, saved
progress and whose it is), create the target (with the source topic's configs kept in
the store: ``rlmm.restore.topic_configs``) and the progress topic when absent, then
read the plan's slices (the archive's read_committed reader: aborted records and
control batches never come out) and send them through one transactional producer
whose ``transactional_id`` is derived from the restore's identity: each archived batch
that can be is sent whole, re-stamped for the producer (``RawBatch``); the records of
any other are appended, with their key, value, headers and CreateTime timestamp, to a
batch of their target partition (``rlmm.restore.source`` says which is which). Up to
``partitions_in_flight`` source partitions are read at once.

Invariants:
- every transaction holds records of one or more source partitions, then the offset
  map of where they went (``rlmm.restore.offset_map``, identity only) and, last, one
  progress record (the next source offset to read) for each source partition whose
  position it moves: data, map and position commit together or not at all, so a run
  killed at any instant and resumed writes each record once, and its map once;
- before progress is read, a start of the restore's transactional producer fences
  any earlier run of the same restore (same transactional id) and aborts its open
  transaction, so no earlier run can commit past the position read (a dry run
  fences nothing);
- every bad input is found before anything is written (RestoreInputError), and a
  target with several problems is refused once, naming them all, with a remedy that
  fixes them all; for every topic of a run of several (``run_restores``: all are
  planned, each into a target topic no other writes, and checked, then restored one
  after another, each with its own transactional id and progress, so each resumes on
  its own);
- within a source partition records are produced in offset order to one target
  partition (identity), or to the partition Kafka's murmur2 gives their key: the
  relative order of records sharing a key is kept either way. One task alone sends,
  in each partition's order; a passed-through batch goes after the records
  re-encoded before it (their batch is sent first);
- the producer, every reader stream and reader thread opened are closed before the
  call returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder

from rlmm.restore.errors import (
    MissingSegmentsError,
    PartitionCountMismatchError,
    ResumeMismatchError,
    SharedTargetError,
    TargetClusterError,
    TargetNotEmptyError,
)
from rlmm.restore.offset_map import OFFSETS_TOPIC, MapBuilder, map_prefix
from rlmm.restore.partitioner import murmur2_partition
from rlmm.restore.plan import IDENTITY, PartitionPlan, RestorePlan
from rlmm.restore.progress import (
    PROGRESS_TOPIC,
    Progress,
    now_ms,
    progress_key,
    read_committed_keys,
    read_progress,
)
from rlmm.restore.raw_batch import RawBatch
from rlmm.restore.source import Passthrough, Row, SliceEnd, Step, partition_steps
from rlmm.restore.target import TargetCluster
from rlmm.restore.topic_configs import ConfigLookup, TopicConfigChoice, target_configs

log = logging.getLogger(__name__)
_LOG_APPEND_TIME = 1
# What the progress topic keeps: the newest record per key.
_PROGRESS_CONFIGS = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
# Kafka's message.max.bytes default: the largest batch assumed when the target's
# max.message.bytes cannot be read (describing configs may be denied by ACLs).
_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
# aiokafka puts one batch of every partition with data ready in a produce request and
# does not cap its size: batches stay small enough that the partitions in flight fit
# under the brokers' socket.request.max.bytes (100 MiB by default).
_MAX_BATCH_BYTES = 8 << 20
# With murmur2 every target partition may have a batch open: aiokafka's default size.
_MURMUR2_BATCH_BYTES = 16_384

# partition, offsets done, offsets in this run, records written, bytes read
ProgressCallback = Callable[[int, int, int, int, int], None]


@dataclass(frozen=True)
class RestoreOptions:
    resume: bool = False
    dry_run: bool = False
    progress_topic: str = PROGRESS_TOPIC
    offsets_topic: str = OFFSETS_TOPIC  # the offset map (rlmm.restore.offset_map)
    # Records per transaction: it commits once it holds this many (an archived
    # batch passed through whole may take it past).
    transaction_records: int = 10_000
    partitions_in_flight: int = 4  # source partitions read and sent at once
    passthrough: bool = True  # False: every record is decoded and re-encoded
    # A target the restore creates gets the source topic's configs kept in the store
    # (rlmm.restore.topic_configs), unless False; these over them.
    topic_configs: bool = True
    topic_config_overrides: Mapping[str, str] = field(default_factory=dict)


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
    batches_passed_through: int = 0  # archived batches sent as they are
    batches_reencoded: int = 0  # archived batches decoded, their records re-batched
    reencoded: Counter[str] = field(default_factory=Counter)  # why, per batch

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
            "batches_passed_through": self.batches_passed_through,
            "batches_reencoded": self.batches_reencoded,
            "reencoded": dict(sorted(self.reencoded.items())),
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
    offsets_topic: str = OFFSETS_TOPIC  # "": no offset map (murmur2 re-spreads records)
    dry_run: bool = False
    resumed: bool = False
    created_target: bool = False
    # Source partitions whose void progress (a target deleted or emptied since) is
    # cleared before this run writes.
    cleared_progress: list[int] = field(default_factory=list)
    results: list[PartitionResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    # The configs a target this run creates gets (None: the target existed).
    topic_configs: TopicConfigChoice | None = None
    bootstrap_servers: str = ""  # the target cluster's, for the commands the summary gives

    @property
    def records(self) -> int:
        return sum(r.records for r in self.results)

    @property
    def log_append_time_records(self) -> int:
        return sum(r.log_append_time_records for r in self.results)

    @property
    def batches_passed_through(self) -> int:
        return sum(r.batches_passed_through for r in self.results)

    @property
    def batches_reencoded(self) -> int:
        return sum(r.batches_reencoded for r in self.results)

    @property
    def reencoded(self) -> Counter[str]:
        return sum((r.reencoded for r in self.results), Counter())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "plan": self.plan.to_dict(self.target_partition_count),
            "target_exists": self.target_exists,
            "transactional_id": self.transactional_id,
            "progress_topic": self.progress_topic,
            "offsets_topic": self.offsets_topic or None,
            "topic_configs": None if self.topic_configs is None else {
                **self.topic_configs.to_dict(),
                "set_after_command": self.topic_configs.after_command(
                    self.bootstrap_servers, self.plan.target_topic
                ),
            },
        }  # fmt: skip
        if not self.dry_run:
            out |= {
                "resumed": self.resumed,
                "created_target": self.created_target,
                "cleared_progress": self.cleared_progress,
                "records": self.records,
                "log_append_time_records": self.log_append_time_records,
                "batches_passed_through": self.batches_passed_through,
                "batches_reencoded": self.batches_reencoded,
                "reencoded": dict(sorted(self.reencoded.items())),
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


def partitions_text(count: int) -> str:
    """``1 partition``, ``3 partitions``."""
    return f"{count} partition{'' if count == 1 else 's'}"


def _check_saved(plan: RestorePlan, saved: Mapping[int, Progress], options: RestoreOptions) -> None:
    target = plan.target_topic
    if not options.resume:
        done = sum(1 for s in saved.values() if s.done)
        first = saved[min(saved)]
        # The flags that continue it, all at once: --resume alone would be refused
        # next for the partitioner it was written with.
        flags = "--resume" + (
            f" --partitioner {first.partitioner}"
            if first.partitioner != plan.selection.partitioner
            else ""
        )
        raise TargetNotEmptyError(
            f"target topic {target!r} holds a restore of {first.source_topic!r} (progress of"
            f" {partitions_text(len(saved))} in {options.progress_topic!r}, {done} done): pass"
            f" {flags} to continue it, or restore into another topic"
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
    plan: RestorePlan,
    plan_for: Callable[[Mapping[int, int] | None], RestorePlan],
    cluster: TargetCluster,
    options: RestoreOptions,
    lookup: ConfigLookup | None = None,
) -> tuple[RestoreReport, dict[int, Progress]]:
    """Every check of ``plan`` (``plan_for(None)``) against the target before anything
    is written; the report of the (resumed) plan."""
    target = plan.target_topic
    if not options.dry_run:
        # Before progress is read: an earlier run still alive could otherwise commit
        # past the position read here, and this run would write those records again.
        await _fence(cluster.client, transactional_id(plan))
    counts = await cluster.partition_counts()
    target_count = counts.get(target)
    # Found first, refused last: a target that also holds data is refused once, for
    # both, with the remedy that fixes both (--partitioner alone would meet the second).
    mismatch = (
        target_count is not None
        and plan.selection.partitioner == IDENTITY
        and target_count != plan.source_partition_count
    )
    source_count = partitions_text(plan.source_partition_count)
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
        elif found is not None and mismatch:
            raise TargetNotEmptyError(
                f"target topic {target!r} has {partitions_text(target_count or 0)} (the source"
                f" {plan.source_topic!r} has {plan.source_partition_count}) and already holds"
                f" data (partition {found[0]} offset {found[1]}) that no restore wrote: restore"
                f" into a new topic (created with {source_count}), or empty this one and pass"
                " --partitioner murmur2"
            )
        elif found is not None:
            raise TargetNotEmptyError(
                f"target topic {target!r} already holds data (partition {found[0]} offset"
                f" {found[1]}) that no restore wrote: restore into a new or empty topic"
            )
    if mismatch:
        raise PartitionCountMismatchError(
            f"target topic {target!r} has {partitions_text(target_count or 0)}, the source"
            f" {plan.source_topic!r} has {source_count}: pass --partitioner murmur2 to spread"
            " the records by key, or restore into a new topic"
        )
    choice = None
    if target_count is None:
        choice = await target_configs(
            plan.source_topic, plan.topic_id, target, plan.source_partition_count, cluster,
            lookup, use_stored=options.topic_configs,
            overrides=options.topic_config_overrides,
        )  # fmt: skip
    if saved:
        plan = await asyncio.to_thread(plan_for, {p: s.next_offset for p, s in saved.items()})
    report = RestoreReport(
        plan=plan,
        target_partition_count=target_count or plan.source_partition_count,
        target_exists=target_count is not None,
        transactional_id=transactional_id(plan),
        progress_topic=options.progress_topic,
        offsets_topic=options.offsets_topic if plan.selection.partitioner == IDENTITY else "",
        dry_run=options.dry_run,
        resumed=bool(saved),
        cleared_progress=sorted(stale),
        topic_configs=choice,
        bootstrap_servers=str(cluster.client.get("bootstrap_servers", "")),
    )
    return report, saved


def _selected(plan: RestorePlan) -> str:
    partitions = [p.source.partition for p in plan.partitions]
    return f"{plan.source_topic!r} partitions {partitions}"


def _check_targets(plans: Sequence[RestorePlan]) -> None:
    """One plan per target topic: two would share its progress keys (target topic,
    source partition) and transactional id, and the second's checks, made before the
    first wrote anything, would not hold when it starts."""
    by_target: dict[str, RestorePlan] = {}
    for plan in plans:
        other = by_target.setdefault(plan.target_topic, plan)
        if other is not plan:
            raise SharedTargetError(
                f"target topic {plan.target_topic!r} would be written by two selections,"
                f" {_selected(other)} and {_selected(plan)}: give each a target topic of"
                " its own"
            )


async def _fence(client: Mapping[str, Any], txn_id: str) -> None:
    """Fence every earlier producer of ``txn_id`` and abort its open transaction:
    a transactional producer's start (InitProducerId) bumps the id's epoch."""
    producer = AIOKafkaProducer(
        **client, client_id="rlmm-restore", transactional_id=txn_id, enable_idempotence=True
    )
    try:
        await producer.start()
    except KafkaError as e:
        raise TargetClusterError(
            f"cannot start the transactional producer {txn_id!r} to fence earlier runs: {e}"
        ) from e
    finally:
        await producer.stop()


PlanFor = Callable[[Mapping[int, int] | None], RestorePlan]


async def run_restore(
    plan_for: PlanFor,
    client: Mapping[str, Any],
    options: RestoreOptions | None = None,
    on_progress: ProgressCallback | None = None,
) -> RestoreReport:
    """Plan (``plan_for(resume_points)``), check, then restore; see the module doc.

    Raises RestoreInputError before writing anything, MissingSegmentsError after
    committing everything up to a gap (``skip_missing`` false)."""

    def per_topic(_topic: str) -> ProgressCallback | None:
        return on_progress

    (report,) = await run_restores([plan_for], client, options, per_topic)
    return report


async def run_restores(
    plan_fors: Sequence[PlanFor],
    client: Mapping[str, Any],
    options: RestoreOptions | None = None,
    on_progress: Callable[[str], ProgressCallback | None] | None = None,
    lookup: ConfigLookup | None = None,
) -> list[RestoreReport]:
    """Several topics' restores, one report each, in the order given: every topic is
    planned and checked (each fencing its own earlier runs) before anything is written
    for any; then each is restored in turn, with its own transactional id and progress.
    ``lookup`` gives the configs kept for a source topic (a target created gets them).

    Raises RestoreInputError before writing anything (SharedTargetError for two plans
    into one target topic, found before the target is contacted; or any topic's
    check), MissingSegmentsError after committing a topic up to
    a gap: the topics after it are not started (a run with ``--resume`` goes on)."""
    options = options or RestoreOptions()
    planned: list[tuple[RestorePlan, float]] = []
    for plan_for in plan_fors:
        started = time.monotonic()
        planned.append((await asyncio.to_thread(plan_for, None), time.monotonic() - started))
    # Before the target is contacted (fencing included).
    _check_targets([plan for plan, _ in planned])
    prepared: list[tuple[RestoreReport, dict[int, Progress], float]] = []
    async with TargetCluster(client) as cluster:
        for plan_for, (plan, spent) in zip(plan_fors, planned, strict=True):
            started = time.monotonic() - spent
            report, saved = await _prepare(plan, plan_for, cluster, options, lookup)
            prepared.append((report, saved, time.monotonic() - started))
    if options.dry_run:
        return [report for report, _, _ in prepared]
    for report, saved, spent in prepared:
        callback = on_progress(report.plan.source_topic) if on_progress is not None else None
        await _write(report, saved, client, options, callback, spent)
    return [report for report, _, _ in prepared]


async def _write(
    report: RestoreReport,
    saved: Mapping[int, Progress],
    client: Mapping[str, Any],
    options: RestoreOptions,
    on_progress: ProgressCallback | None,
    spent: float,
) -> None:
    """One checked plan into the target (``spent``: the seconds its checks took)."""
    started = time.monotonic() - spent
    plan = report.plan
    async with TargetCluster(client) as cluster:
        if not report.target_exists:
            configs = report.topic_configs.applied if report.topic_configs is not None else None
            report.created_target = await cluster.create_topic(
                plan.target_topic, plan.source_partition_count, configs
            )
        counts = await cluster.partition_counts()
        if options.progress_topic not in counts:
            await cluster.create_topic(options.progress_topic, 1, _PROGRESS_CONFIGS)
        if report.offsets_topic and report.offsets_topic not in counts:
            await cluster.create_topic(report.offsets_topic, 1, _PROGRESS_CONFIGS)
            counts[report.offsets_topic] = 1
        map_partitions = counts.get(report.offsets_topic, 0)
        try:
            max_bytes = await cluster.max_message_bytes(plan.target_topic)
        except TargetClusterError as e:
            log.warning("%s; assuming Kafka's default, %d bytes", e, _DEFAULT_MAX_MESSAGE_BYTES)
            max_bytes = _DEFAULT_MAX_MESSAGE_BYTES
        max_bytes = min(max_bytes, _MAX_BATCH_BYTES)
    writer = _Writer(report, dict(client), options, saved, on_progress, max_bytes)
    writer.map_partitions = map_partitions
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


# A reader's hand-over: a list of steps, None at the partition's end, or its error.
_Item = tuple[PartitionPlan, list[Step] | Exception | None]


class _Writer:
    """One run's transactional producer over the plan's partitions, several at a time.

    Reader tasks (at most ``partitions_in_flight``, each reading in a thread of its
    own) hand each partition's steps, in order, to one queue; this writer alone sends
    them, so a transaction holds whatever partitions' records arrived while it was
    open, and, last, one progress record for each partition it touched."""

    def __init__(
        self,
        report: RestoreReport,
        client: dict[str, Any],
        options: RestoreOptions,
        saved: Mapping[int, Progress],
        on_progress: ProgressCallback | None,
        max_bytes: int,
    ) -> None:
        self.report = report
        self.plan = report.plan
        self.client = client
        self.options = options
        self.saved = saved
        self.on_progress = on_progress
        self.max_bytes = max_bytes
        self._builders: dict[int, BatchBuilder] = {}  # target partition -> open batch
        self._pending: list[asyncio.Future[Any]] = []  # sends of the open transaction
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
        self.map_partitions = 0  # of the offsets topic (to clear a map that is void)
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
            # A restore that starts over (no progress of its own): a map of the target
            # left by an earlier one (into a topic deleted since) is void.
            void = [] if self.report.resumed or self._map is None else await self._void_map()
            if self.report.cleared_progress or void:
                await self._clear(self.report.cleared_progress, void)
            await self._partitions()
        except KafkaError as e:
            raise TargetClusterError(f"restoring into {self.plan.target_topic!r}: {e}") from e
        finally:
            # Unsent or unacknowledged records of the open transaction: never
            # committed (stopping aborts it, or the next run's fencing drops them).
            for future in self._pending:
                future.cancel()
            await self.producer.stop()

    async def _partitions(self) -> None:
        in_flight = max(1, self.options.partitions_in_flight)
        queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=2 * in_flight)
        results: dict[int, PartitionResult] = {}
        for p in self.plan.partitions:
            previous = self.saved.get(p.source.partition)
            results[p.source.partition] = PartitionResult(
                p.source.partition, p.start_offset, p.start_offset, p.end_offset,
                records_total=previous.records if previous is not None else 0,
            )  # fmt: skip
        self.report.results = list(results.values())
        todo = [p for p in self.plan.partitions if p.start_offset < p.run_end]
        live: set[int] = set()
        readers: set[asyncio.Task[None]] = set()
        executor = ThreadPoolExecutor(in_flight, thread_name_prefix="rlmm-restore-read")

        def start_readers() -> None:
            while todo and len(live) < in_flight:
                p = todo.pop(0)
                live.add(p.source.partition)
                self._report(p, results[p.source.partition])
                task = asyncio.create_task(self._read(p, queue, executor))
                readers.add(task)
                task.add_done_callback(readers.discard)

        try:
            start_readers()
            while live:
                p, item = await queue.get()
                result = results[p.source.partition]
                if isinstance(item, Exception):
                    raise item
                if item is None:
                    live.discard(p.source.partition)
                    # Offsets after the last record (aborted ones, markers) are done.
                    await self._moved(p, result, p.run_end)
                    start_readers()
                    continue
                for step in item:
                    await self._step(p, result, step)
            if self._open:
                await self._commit()
        finally:
            for task in list(readers):
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            executor.shutdown(wait=True)

    async def _read(
        self, p: PartitionPlan, queue: asyncio.Queue[_Item], executor: ThreadPoolExecutor
    ) -> None:
        """Hand the partition's steps to the writer: lists of them, then None (or the
        error that stopped the reading)."""
        identity = self.plan.selection.partitioner == IDENTITY
        stream = partition_steps(
            p, passthrough=identity and self.options.passthrough, max_bytes=self.max_bytes
        )
        running: Future[list[Step] | None] | None = None
        try:
            while True:
                # Fetching and decoding block: off the loop, so the producer's sender
                # keeps sending meanwhile.
                running = executor.submit(next, stream, None)
                steps = await asyncio.wrap_future(running)
                running = None
                if steps is None:
                    break
                await queue.put((p, steps))
            await queue.put((p, None))
        except Exception as e:
            await queue.put((p, e))
        finally:
            if running is not None and not running.done():
                # The generator cannot be closed while its thread runs it.
                await asyncio.wait([asyncio.wrap_future(running)])
            stream.close()

    async def _step(self, p: PartitionPlan, result: PartitionResult, step: Step) -> None:
        if isinstance(step, SliceEnd):
            result.bytes_read += step.size_in_bytes
            # Offsets after the slice's last record (aborted ones, markers) are done.
            await self._moved(p, result, step.until_offset)
        elif isinstance(step, Passthrough):
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
                self._map.batch(
                    source, sent, step.header.base_offset, step.header.last_offset, count
                )
            result.records += count
            result.records_total += count
            result.batches_passed_through += 1
            result.next_offset = step.header.last_offset + 1
            self._in_txn += count
            if self._in_txn >= self.options.transaction_records:
                await self._commit()
        else:
            result.batches_reencoded += sum(step.reasons.values())
            result.reencoded.update(step.reasons)
            await self._send_rows(p, result, step.rows)

    async def _moved(self, p: PartitionPlan, result: PartitionResult, offset: int) -> None:
        """The partition is done below ``offset``: its next commit says so."""
        if offset > result.next_offset:
            result.next_offset = offset
            if not self._open:
                await self._begin()
            self._touched[p.source.partition] = (p, result)

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

    async def _send_rows(self, p: PartitionPlan, result: PartitionResult, rows: list[Row]) -> None:
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
            self._report(p, result)
        self._touched.clear()

    def _report(self, p: PartitionPlan, result: PartitionResult) -> None:
        if self.on_progress is not None:
            total = max(1, p.run_end - p.start_offset)
            done = min(total, result.next_offset - result.start_offset)
            self.on_progress(result.partition, done, total, result.records, result.bytes_read)


__all__ = [
    "PartitionResult",
    "PlanFor",
    "ProgressCallback",
    "RestoreOptions",
    "RestoreReport",
    "run_restore",
    "run_restores",
    "transactional_id",
]
