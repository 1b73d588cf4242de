"""What a restore checks of its target before it writes: the report of the plan to run.

Job: fence the restore's earlier runs, read the progress saved in the target cluster
and say whose it is (this restore's, to resume from; void, to clear; another
source's, refused), look at the target topic (partition count, data no restore
wrote), choose the configs of a target to create, and re-plan from the resume
points; refuse two plans into one target topic before the target is contacted.

Invariants:
- nothing is written here: every bad input is found before the first write
  (RestoreInputError), and a target with several problems is refused once, naming
  them all, with a remedy that fixes them all;
- before progress is read, a start of the restore's transactional producer fences
  any earlier run of the same restore (same transactional id) and aborts its open
  transaction, so no earlier run can commit past the position read (a dry run
  fences nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from rlmm.restore.errors import (
    PartitionCountMismatchError,
    ResumeMismatchError,
    SharedTargetError,
    TargetClusterError,
    TargetNotEmptyError,
)
from rlmm.restore.plan import IDENTITY, PartitionPlan, RestorePlan
from rlmm.restore.progress import Progress, read_progress
from rlmm.restore.report import RestoreOptions, RestoreReport, partitions_text, transactional_id
from rlmm.restore.target import TargetCluster
from rlmm.restore.topic_configs import ConfigLookup, target_configs


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


async def prepare(
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
    saved, stale = await _saved_progress(
        plan, cluster, options, target_count, counts.get(options.progress_topic, 0), mismatch
    )
    if mismatch:
        raise PartitionCountMismatchError(
            f"target topic {target!r} has {partitions_text(target_count or 0)}, the source"
            f" {plan.source_topic!r} has {partitions_text(plan.source_partition_count)}: pass"
            " --partitioner murmur2 to spread the records by key, or restore into a new topic"
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


async def _saved_progress(
    plan: RestorePlan,
    cluster: TargetCluster,
    options: RestoreOptions,
    target_count: int | None,
    progress_partitions: int,
    mismatch: bool,
) -> tuple[dict[int, Progress], dict[int, Progress]]:
    """The progress saved for the target topic: this restore's, to resume from, and
    void progress, to clear before the first record. Refuses progress of another
    restore, and a target holding data no restore wrote (naming a partition count
    ``mismatch`` in the same refusal)."""
    target = plan.target_topic
    topic = options.progress_topic
    if target_count is None:
        # Progress into a topic that is gone (deleted since): void, cleared before
        # the first record, so that a crash of this run cannot resume from it.
        return {}, await read_progress(cluster.client, target, progress_partitions, topic=topic)
    saved = await read_progress(cluster.client, target, progress_partitions, topic=topic)
    found = await cluster.committed_record(target, target_count)
    if saved and found is None:
        # Progress, but no committed record in the target: it was deleted and
        # recreated (or only aborted records were restored). Nothing can be doubled
        # by starting over, and resuming would skip what the progress claims.
        return {}, saved
    if saved:
        _check_saved(plan, saved, options)
    elif found is not None and mismatch:
        raise TargetNotEmptyError(
            f"target topic {target!r} has {partitions_text(target_count)} (the source"
            f" {plan.source_topic!r} has {plan.source_partition_count}) and already holds"
            f" data (partition {found[0]} offset {found[1]}) that no restore wrote: restore"
            f" into a new topic (created with {partitions_text(plan.source_partition_count)}),"
            " or empty this one and pass --partitioner murmur2"
        )
    elif found is not None:
        raise TargetNotEmptyError(
            f"target topic {target!r} already holds data (partition {found[0]} offset"
            f" {found[1]}) that no restore wrote: restore into a new or empty topic"
        )
    return saved, {}


def _selected(plan: RestorePlan) -> str:
    partitions = [p.source.partition for p in plan.partitions]
    return f"{plan.source_topic!r} partitions {partitions}"


def check_targets(plans: Sequence[RestorePlan]) -> None:
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


__all__ = ["check_targets", "prepare"]
