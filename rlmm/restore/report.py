"""What a restore is asked to do and what one run did: its options and its report.

Job: ``RestoreOptions`` (resume, dry run, the progress and offset-map topics, records
per transaction, partitions in flight, pass-through, the target's configs), the
report of a run (``RestoreReport``, one ``PartitionResult`` per source partition, as
the CLI prints them and ``--json`` gives them), the progress callback's shape, and the
restore's transactional id.

Invariant: values only, no I/O; one restore (source topic id, target topic) has one
transactional id, the same in every run, so a rerun fences the run before it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlmm.restore.offset_map import OFFSETS_TOPIC
from rlmm.restore.plan import RestorePlan
from rlmm.restore.progress import PROGRESS_TOPIC
from rlmm.restore.topic_configs import TopicConfigChoice

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


def partitions_text(count: int) -> str:
    """``1 partition``, ``3 partitions``."""
    return f"{count} partition{'' if count == 1 else 's'}"


__all__ = [
    "PartitionResult",
    "ProgressCallback",
    "RestoreOptions",
    "RestoreReport",
    "partitions_text",
    "transactional_id",
]
