"""RestorePlan: what a restore reads from the archive and where it writes it.

Job: from a RestoreSelection (topic, partitions, an offset or timestamp range, target
topic, partitioner) and a MetadataView (of ``__remote_log_metadata``, or rebuilt from
the store alone), resolve each source partition's range to offsets ``[first, end)``,
check it against the archive, and plan it into the archive's slices (read_committed,
with headers). A resume point cuts the plan without changing the range.

Invariants: a plan is built before anything is written anywhere, and every bad input
raises a RestoreInputError naming it (unknown topic or partition, a range outside the
archive); ``[first, end)`` depends on the selection and the archive only, never on a
resume point, so two runs of one restore agree on it (the saved progress is checked
against it); slices of a partition are in offset order and tile the range but for its
gaps; with ``skip_missing`` false the slices stop before the first gap, which the plan
names (``stop_gap``); each partition's plan says where the archive ends and the
largest timestamp of its last segment, whatever the range: what the source held after
that (at least its active segment, never copied) is not in the archive.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remote.layouts import RemoteLayout
from rlmm.archive import (
    READ_COMMITTED,
    ArchiveError,
    Gap,
    MetadataView,
    ReadRequest,
    Slice,
    plan_slices,
)
from rlmm.model import TopicIdPartition, kafka_uuid_to_str
from rlmm.restore.errors import (
    RangeOutsideArchiveError,
    RestoreInputError,
    UnknownSourceError,
)

IDENTITY = "identity"
MURMUR2 = "murmur2"
PARTITIONERS = (IDENTITY, MURMUR2)
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class RestoreSelection:
    """What to restore: ``to_offset`` and ``to_timestamp_ms`` are exclusive ends."""

    topic: str
    partitions: tuple[int, ...] = ()  # empty: every archived partition
    from_offset: int | None = None
    to_offset: int | None = None
    from_timestamp_ms: int | None = None
    to_timestamp_ms: int | None = None
    target_topic: str | None = None  # None: the source topic's name
    partitioner: str = IDENTITY
    skip_missing: bool = False

    def __post_init__(self) -> None:
        if self.partitioner not in PARTITIONERS:
            raise RestoreInputError(
                f"unknown partitioner {self.partitioner!r} (expected one of {PARTITIONERS})"
            )
        if self.from_offset is not None and self.from_timestamp_ms is not None:
            raise RestoreInputError("give --from-offset or --from-timestamp, not both")
        if self.to_offset is not None and self.to_timestamp_ms is not None:
            raise RestoreInputError("give --to-offset or --to-timestamp, not both")
        target = self.target
        if not _TOPIC.fullmatch(target) or target in (".", ".."):
            raise RestoreInputError(f"{target!r} is not a legal Kafka topic name")

    @property
    def target(self) -> str:
        return self.target_topic or self.topic


def select_topics(
    topics: Sequence[str],
    *,
    target_topic: str | None = None,
    target_prefix: str | None = None,
    **common: Any,
) -> list[RestoreSelection]:
    """One selection per source topic, each with the same partitions, range, partitioner
    and ``skip_missing`` (``common``): the target is ``target_topic`` (one topic only),
    or the source's name after ``target_prefix`` (empty or None: the source's name).

    Raises RestoreInputError for no topic, a topic named twice, ``target_topic`` with
    several topics, or both ``target_topic`` and ``target_prefix``."""
    if not topics:
        raise RestoreInputError("no topic to restore")
    twice = sorted({t for t in topics if list(topics).count(t) > 1})
    if twice:
        raise RestoreInputError(f"topic {twice[0]!r} is named twice")
    if target_topic is not None and target_prefix:
        raise RestoreInputError("give --target-topic or --target-prefix, not both")
    if target_topic is not None and len(topics) > 1:
        raise RestoreInputError(
            f"--target-topic names the target of one topic, not of {len(topics)}:"
            " use --target-prefix, or one run per topic"
        )
    return [
        RestoreSelection(
            topic=t,
            target_topic=target_topic
            if target_topic is not None
            else (f"{target_prefix}{t}" if target_prefix else None),
            **common,
        )
        for t in topics
    ]


@dataclass(frozen=True)
class PartitionPlan:
    """One source partition: its range, what this run reads of it, where it goes."""

    source: TopicIdPartition
    first_offset: int
    end_offset: int  # exclusive; the last stable offset when a transaction is open there
    slices: tuple[Slice, ...]
    gaps: tuple[Gap, ...]  # inside [first_offset, end_offset)
    stop_gap: Gap | None  # the gap this run stops at (skip_missing false)
    resume_from: int | None = None
    # Where the archive of this partition ends (exclusive, whatever the range), and the
    # largest timestamp of the segment holding its last offset (None: no timestamp):
    # records the source wrote after these were never archived.
    archive_end_offset: int | None = None
    archive_newest_timestamp_ms: int | None = None

    @property
    def start_offset(self) -> int:
        """Where this run starts reading."""
        return self.first_offset if self.resume_from is None else self.resume_from

    @property
    def run_end(self) -> int:
        """Where this run stops: the range's end, or the gap it stops at."""
        return self.end_offset if self.stop_gap is None else self.stop_gap.first_offset

    @property
    def segments(self) -> int:
        return len({s.segment.remote_log_segment_id for s in self.slices})

    @property
    def bytes(self) -> int:
        return sum(s.size_in_bytes for s in self.slices)

    @property
    def offsets(self) -> int:
        """Offsets this run covers: the records it restores are at most this many
        (aborted records and transaction markers take offsets too)."""
        missing = sum(
            min(g.last_offset + 1, self.run_end) - max(g.first_offset, self.start_offset)
            for g in self.gaps
            if g.first_offset < self.run_end and g.last_offset >= self.start_offset
        )
        return max(0, self.run_end - self.start_offset - missing)


@dataclass(frozen=True)
class RestorePlan:
    """The whole restore: one PartitionPlan per source partition, in partition order."""

    selection: RestoreSelection
    source_topic: str
    topic_id: str  # Kafka's base64url text
    source_partition_count: int
    partitions: tuple[PartitionPlan, ...]
    metadata_source: str  # "metadata" (the event log) or "store" (object names alone)
    store: str  # the layout, for messages

    @property
    def target_topic(self) -> str:
        return self.selection.target

    def target_partitions(self, p: PartitionPlan, target_count: int | None = None) -> list[int]:
        if self.selection.partitioner == IDENTITY:
            return [p.source.partition]
        return list(range(target_count or self.source_partition_count))

    def to_dict(self, target_count: int | None = None) -> dict[str, Any]:
        return {
            "source": {
                "topic": self.source_topic,
                "topic_id": self.topic_id,
                "partition_count": self.source_partition_count,
                "metadata": self.metadata_source,
                "store": self.store,
            },
            "target": {
                "topic": self.target_topic,
                "partitioner": self.selection.partitioner,
                "partition_count": target_count or self.source_partition_count,
            },
            "partitions": [
                {
                    "partition": p.source.partition,
                    "first_offset": p.first_offset,
                    "end_offset": p.end_offset,
                    "start_offset": p.start_offset,
                    "segments": p.segments,
                    "bytes": p.bytes,
                    "offsets": p.offsets,
                    "gaps": [
                        {"first_offset": g.first_offset, "last_offset": g.last_offset}
                        for g in p.gaps
                    ],
                    "stops_at_gap": p.stop_gap is not None,
                    "target_partitions": self.target_partitions(p, target_count),
                    "archive_end_offset": p.archive_end_offset,
                    "archive_newest_timestamp_ms": p.archive_newest_timestamp_ms,
                }
                for p in self.partitions
            ],
            "segments": sum(p.segments for p in self.partitions),
            "bytes": sum(p.bytes for p in self.partitions),
            "offsets": sum(p.offsets for p in self.partitions),
        }


def _source_partitions(view: MetadataView, selection: RestoreSelection) -> list[TopicIdPartition]:
    known = [tp for tp in view.topic_partitions() if tp.topic == selection.topic]
    if not known:
        topics = sorted({tp.topic for tp in view.topic_partitions()})
        shown = ", ".join(topics[:20]) + (" ..." if len(topics) > 20 else "")
        raise UnknownSourceError(
            f"unknown topic {selection.topic!r}: nothing of it in the archive"
            f" (known: {shown or 'none'})"
        )
    ids = {tp.topic_id for tp in known}
    if len(ids) > 1:
        raise UnknownSourceError(
            f"topic {selection.topic!r} is archived under {len(ids)} topic ids (it was deleted"
            " and recreated): restoring one of them is not supported yet"
        )
    by_partition = {tp.partition: tp for tp in known}
    if not selection.partitions:
        return [by_partition[p] for p in sorted(by_partition)]
    missing = sorted(set(selection.partitions) - set(by_partition))
    if missing:
        raise UnknownSourceError(
            f"partitions {missing} of topic {selection.topic!r} are not in the archive"
            f" (it has {sorted(by_partition)})"
        )
    return [by_partition[p] for p in sorted(set(selection.partitions))]


def _plan_partition(
    view: MetadataView,
    layout: RemoteLayout,
    remote_options: Mapping[str, Any],
    selection: RestoreSelection,
    tp: TopicIdPartition,
    resume_from: int | None,
) -> PartitionPlan | None:
    ranges = view.lineage_ranges(tp)
    if not ranges:
        return None
    where = f"{tp.topic}-{tp.partition}"
    earliest, latest = ranges[0].first_offset, ranges[-1].last_offset + 1
    first = earliest if selection.from_offset is None else selection.from_offset
    end = latest if selection.to_offset is None else selection.to_offset
    if first < earliest or end > latest or first > end:
        raise RangeOutsideArchiveError(
            f"{where}: offsets [{first}, {end}) are outside the archive, which holds"
            f" [{earliest}, {latest})"
        )
    key = (tp.topic, tp.partition)
    options: dict[str, Any] = {}
    if selection.from_timestamp_ms is not None:
        options["starting_timestamp_ms"] = {key: selection.from_timestamp_ms}
    else:
        options["starting_offsets"] = {key: first}
    if selection.to_timestamp_ms is not None:
        options["ending_timestamp_ms"] = {key: selection.to_timestamp_ms}
    else:
        options["ending_offsets"] = {key: end}
    request = ReadRequest(
        partitions={tp.topic: (tp.partition,)},
        isolation_level=READ_COMMITTED,
        include_headers=True,
        # Gaps are this module's to report (stop there, or skip with --skip-missing).
        fail_on_data_loss=False,
        **options,
    )
    try:
        slices = plan_slices(view, request, remote_options, layout=layout)
    except ArchiveError as e:
        raise RangeOutsideArchiveError(f"{where}: {e}") from e
    if slices:
        if selection.from_timestamp_ms is not None:
            first = slices[0].from_offset
        # The planner ends read_committed at the last stable offset (a transaction
        # still open at the archive's end), and a timestamp end where it was found.
        end = slices[-1].until_offset
    elif selection.from_timestamp_ms is not None or selection.to_timestamp_ms is not None:
        first = end = first if selection.from_timestamp_ms is None else latest
    gaps = tuple(g for g in view.gaps(tp) if g.first_offset < end and g.last_offset >= first)
    start = first if resume_from is None else resume_from
    stop_gap = None
    if not selection.skip_missing:
        stop_gap = next((g for g in gaps if g.last_offset >= start), None)
    run_end = end if stop_gap is None else stop_gap.first_offset
    run: list[Slice] = []
    for piece in slices:
        if piece.until_offset <= start or piece.from_offset >= run_end:
            continue
        if piece.from_offset < start:
            # The reader returns only offsets in [from, until): reading from the slice's
            # byte position on and dropping what is below the resume point is exact.
            piece = dataclasses.replace(piece, from_offset=start)
        run.append(piece)
    newest = ranges[-1].segment.max_timestamp_ms
    return PartitionPlan(
        tp, first, end, tuple(run), gaps, stop_gap, resume_from,
        archive_end_offset=latest,
        archive_newest_timestamp_ms=newest if newest >= 0 else None,
    )  # fmt: skip


def build_plan(
    view: MetadataView,
    layout: RemoteLayout,
    remote_options: Mapping[str, Any],
    selection: RestoreSelection,
    *,
    metadata_source: str,
    resume_from: Mapping[int, int] | None = None,
) -> RestorePlan:
    """The plan of ``selection`` over the archive ``view`` describes (RestoreInputError
    for bad input); ``resume_from`` maps source partitions to the next offset to read."""
    tps = _source_partitions(view, selection)
    parts = []
    for tp in tps:
        plan = _plan_partition(
            view, layout, remote_options, selection, tp, (resume_from or {}).get(tp.partition)
        )
        if plan is not None:
            parts.append(plan)
    all_partitions = {tp.partition for tp in view.topic_partitions() if tp.topic == tps[0].topic}
    return RestorePlan(
        selection=selection,
        source_topic=selection.topic,
        topic_id=kafka_uuid_to_str(tps[0].topic_id),
        source_partition_count=max(all_partitions) + 1,
        partitions=tuple(parts),
        metadata_source=metadata_source,
        store=repr(layout),
    )


__all__ = [
    "IDENTITY",
    "MURMUR2",
    "PARTITIONERS",
    "PartitionPlan",
    "RestorePlan",
    "RestoreSelection",
    "build_plan",
    "select_topics",
]
