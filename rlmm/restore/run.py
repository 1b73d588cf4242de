"""run_restore: the archive's committed records into a live topic, exactly once across crashes.

Job: the run, from end to end. Plan each topic, check every plan against the target
before anything is written (``rlmm.restore.checks``), then restore each in turn:
create the target (with the source topic's configs kept in the store:
``rlmm.restore.topic_configs``), the progress topic and the offset-map topic when
absent, read the target's batch size limit, and run the plan's partitions
(``rlmm.restore.partition_loop``) through one transactional producer
(``rlmm.restore.transaction``) whose ``transactional_id`` is derived from the
restore's identity (``rlmm.restore.report``). Each archived batch that can be is sent
whole, re-stamped for the producer (``RawBatch``); the records of any other are
appended, with their key, value, headers and CreateTime timestamp, to a batch of
their target partition (``rlmm.restore.source`` says which is which). Up to
``partitions_in_flight`` source partitions are read at once.

Invariants:
- data, offset map and position commit together or not at all
  (``rlmm.restore.transaction``), and a run fences every earlier run of the same
  restore before it reads progress (``rlmm.restore.checks``): a run killed at any
  instant and resumed writes each record once, and its map once;
- every bad input is found before anything is written (RestoreInputError), for every
  topic of a run of several (``run_restores``: all are planned, each into a target
  topic no other writes, and checked, then restored one after another, each with its
  own transactional id and progress, so each resumes on its own);
- a gap in the archive (``skip_missing`` false) is raised as MissingSegmentsError
  after everything before it has committed; the topics after it are not started;
- the producer, every reader stream and reader thread opened are closed before the
  call returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlmm.restore.checks import check_targets, prepare
from rlmm.restore.errors import MissingSegmentsError, TargetClusterError
from rlmm.restore.partition_loop import PartitionLoop
from rlmm.restore.plan import RestorePlan
from rlmm.restore.progress import Progress
from rlmm.restore.report import ProgressCallback, RestoreOptions, RestoreReport
from rlmm.restore.target import TargetCluster
from rlmm.restore.topic_configs import ConfigLookup

log = logging.getLogger(__name__)
# What the progress topic keeps: the newest record per key.
_PROGRESS_CONFIGS = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
# Kafka's message.max.bytes default: the largest batch assumed when the target's
# max.message.bytes cannot be read (describing configs may be denied by ACLs).
_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
# aiokafka puts one batch of every partition with data ready in a produce request and
# does not cap its size: batches stay small enough that the partitions in flight fit
# under the brokers' socket.request.max.bytes (100 MiB by default).
_MAX_BATCH_BYTES = 8 << 20

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
    check_targets([plan for plan, _ in planned])
    prepared: list[tuple[RestoreReport, dict[int, Progress], float]] = []
    async with TargetCluster(client) as cluster:
        for plan_for, (plan, spent) in zip(plan_fors, planned, strict=True):
            started = time.monotonic() - spent
            report, saved = await prepare(plan, plan_for, cluster, options, lookup)
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
    loop = PartitionLoop(
        report, dict(client), options, saved, on_progress, max_bytes, map_partitions
    )
    try:
        await loop.run()
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


__all__ = ["PlanFor", "run_restore", "run_restores"]
