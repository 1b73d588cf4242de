"""Inventories of remote storage: segments by filter, per-partition summaries, one segment.

The library side of ``rlmm segments list|show`` and ``rlmm partitions``, computed
from a read-only MetadataView (and, for one segment, the stored objects and the
events that made it). Invariant: nothing here writes; every answer is derived from
the view handed in, so two calls on one view agree (a partition summary's age is of
the ``now_ms`` handed in too).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from remote.layouts import RemoteLayout
from rlmm.archive import MetadataView
from rlmm.archive.lineage import gaps as lineage_gaps
from rlmm.config import RlmmConfig
from rlmm.errors import ConfigError, RemoteResourceNotFoundError, RemoteStorageError
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    kafka_uuid_from_str,
    kafka_uuid_to_str,
)
from rlmm.ops.describe import partition_fields, segment_fields
from rlmm.ops.event_dump import DumpedEvent, segment_history

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True)
class SegmentFilter:
    """Which segments a listing shows (None: any)."""

    topic: str | None = None
    partition: int | None = None
    state: RemoteLogSegmentState | None = None
    leader_epoch: int | None = None

    def partition_matches(self, tp: TopicIdPartition) -> bool:
        return (self.topic is None or tp.topic == self.topic) and (
            self.partition is None or tp.partition == self.partition
        )

    def matches(self, m: RemoteLogSegmentMetadata) -> bool:
        return (
            self.partition_matches(m.topic_id_partition)
            and (self.state is None or m.state == self.state)
            and (self.leader_epoch is None or self.leader_epoch in m.segment_leader_epochs)
        )


def list_segments(
    view: MetadataView, where: SegmentFilter | None = None
) -> list[RemoteLogSegmentMetadata]:
    """Every live segment matching ``where``, by (topic, partition, start offset)."""
    where = where or SegmentFilter()
    return [
        m
        for tp in view.topic_partitions()
        if where.partition_matches(tp)
        for m in view.segments(tp)
        if where.matches(m)
    ]


def served_offsets(
    view: MetadataView, segments: list[RemoteLogSegmentMetadata]
) -> dict[RemoteLogSegmentId, tuple[int, int]]:
    """The offsets each of ``segments`` serves on its partition's lineage (first, last).

    A segment missing from the result serves none: superseded by a newer leader's copy,
    off the lineage, or not COPY_SEGMENT_FINISHED. Where two leaders' segments overlap,
    each offset is served by one of them only (the lineage decides which)."""
    out: dict[RemoteLogSegmentId, tuple[int, int]] = {}
    for tp in {m.topic_id_partition for m in segments}:
        for r in view.lineage_ranges(tp):
            sid = r.segment.remote_log_segment_id
            first, last = out.get(sid, (r.first_offset, r.last_offset))
            out[sid] = (min(first, r.first_offset), max(last, r.last_offset))
    return out


def check_topic_known(view: MetadataView, topic: str | None) -> None:
    """RemoteResourceNotFoundError naming the known topics when ``topic`` has nothing in
    the metadata (a typo must not read as "0 segments")."""
    if topic is None:
        return
    known = sorted({tp.topic for tp in view.topic_partitions()})
    if topic not in known:
        shown = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "")
        raise RemoteResourceNotFoundError(
            f"unknown topic {topic!r}: no segment of it in the metadata (known: {shown or 'none'})"
        )


def check_remote_holds(layout: RemoteLayout, segments: list[RemoteLogSegmentMetadata]) -> None:
    """ConfigError when the configured remote storage holds the log object of none of a
    few finished segments of ``segments`` (the first, middle and last): the ``[remote]``
    settings point elsewhere than where the segments were copied (a wrong dir, root,
    bucket or prefix), which a listing of the metadata alone would not show. One
    missing object is damage for ``verify`` to report, not a configuration error."""
    finished = [m for m in segments if m.state == _FINISHED]
    if not finished:
        return
    sample = {id(m): m for m in (finished[0], finished[len(finished) // 2], finished[-1])}
    first_missing = None
    for m in sample.values():
        name = layout.log_object_name(m)
        try:
            layout.open_object(name).close()
        except RemoteResourceNotFoundError:
            first_missing = first_missing or name
            continue
        return
    raise ConfigError(
        f"the metadata lists segments that {layout!r} does not hold (no {first_missing}):"
        " check the [remote] settings (remote.type, and its dir, root or bucket and prefix)"
    )


def find_segment(view: MetadataView, segment_id: str) -> RemoteLogSegmentMetadata:
    """The live segment with this id (Kafka's base64 text or a dashed uuid)."""
    try:
        wanted = kafka_uuid_from_str(segment_id)
    except ValueError as e:
        raise RemoteResourceNotFoundError(f"{segment_id!r} is not a segment id: {e}") from e
    for tp in view.topic_partitions():
        for m in view.segments(tp):
            if m.remote_log_segment_id.id == wanted:
                return m
    raise RemoteResourceNotFoundError(f"unknown segment id {segment_id}: no live segment has it")


# --- one segment in full --------------------------------------------------------------------


@dataclass(frozen=True)
class StoredObject:
    """One object of a segment copy: what the manifest recorded and what is stored."""

    name: str
    kind: str  # what the object holds: "log segment", "OFFSET index", "manifest", ...
    recorded_size: int | None
    recorded_crc32c: int | None
    stored_size: int | None  # None: not in remote storage
    last_modified_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "recorded_size": self.recorded_size,
            "recorded_crc32c": None
            if self.recorded_crc32c is None
            else f"{self.recorded_crc32c:08x}",
            "stored_size": self.stored_size,
            "last_modified_ms": self.last_modified_ms,
        }


@dataclass(frozen=True)
class SegmentDetail:
    """Everything about one segment: metadata, stored objects, the events that made it."""

    metadata: RemoteLogSegmentMetadata
    objects: list[StoredObject]
    events: list[DumpedEvent]

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": segment_fields(self.metadata),
            "objects": [o.to_dict() for o in self.objects],
            "events": [e.to_dict() for e in self.events],
        }


def stored_objects(layout: RemoteLayout, m: RemoteLogSegmentMetadata) -> list[StoredObject]:
    """The objects of ``m``'s copy: every one the layout expects (with what its writer
    recorded) and any other stored object of the same segment id."""
    listing = {o.name: o for o in layout.list_objects(m.topic_id_partition)}
    try:
        expected = layout.segment_objects(m)
    except RemoteStorageError:
        # An unreadable manifest: show what is stored (``rlmm verify`` names the problem).
        expected = []
    out = []
    seen = set()
    for obj in expected:
        stored = listing.get(obj.name)
        if stored is None and not obj.required:
            continue
        seen.add(obj.name)
        out.append(
            StoredObject(
                obj.name,
                obj.label,
                obj.recorded_size,
                obj.recorded_crc32c,
                None if stored is None else stored.size,
                None if stored is None else stored.last_modified_ms,
            )
        )
    segment_id = kafka_uuid_to_str(m.remote_log_segment_id.id)
    for name, stored in listing.items():
        parsed = layout.parse_object_name(name)
        if name in seen or parsed is None or parsed.segment_id != segment_id:
            continue
        out.append(
            StoredObject(name, parsed.label, None, None, stored.size, stored.last_modified_ms)
        )
    return out


def describe_segment(
    config: RlmmConfig,
    view: MetadataView,
    layout: RemoteLayout,
    segment_id: str,
    *,
    history: bool = True,
) -> SegmentDetail:
    """One segment in full: its metadata, stored objects and metadata events (none
    without ``history``: a view of the store alone has no metadata log to read)."""
    m = find_segment(view, segment_id)
    events = segment_history(config, m.remote_log_segment_id) if history else []
    return SegmentDetail(m, stored_objects(layout, m), events)


# --- partitions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionSummary:
    """One topic-partition's remote log at a glance."""

    topic_id_partition: TopicIdPartition
    segment_count: int
    remote_bytes: int
    start_offset: int | None  # of the COPY_SEGMENT_FINISHED segments
    end_offset: int | None
    highest_offset_per_epoch: dict[int, int]
    state_counts: dict[str, int]
    delete_state: str | None
    gaps: list[tuple[int, int]] = field(default_factory=list)
    # The largest timestamp of the segment serving the lineage's last offset: records
    # written after it (the active segment when the archive was last copied to, and
    # anything since) are not in the archive. None: nothing archived, or no timestamp.
    newest_timestamp_ms: int | None = None
    as_of_ms: int | None = None  # when the summary was made: the age is from it

    @property
    def newest_age_s(self) -> float | None:
        """Seconds from the newest archived record to ``as_of_ms`` (None: unknown)."""
        if self.newest_timestamp_ms is None or self.as_of_ms is None:
            return None
        return (self.as_of_ms - self.newest_timestamp_ms) / 1000

    def to_dict(self) -> dict[str, Any]:
        return {
            **partition_fields(self.topic_id_partition),
            "segment_count": self.segment_count,
            "remote_bytes": self.remote_bytes,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "highest_offset_per_epoch": {
                str(e): o for e, o in sorted(self.highest_offset_per_epoch.items())
            },
            "state_counts": dict(self.state_counts),
            "delete_state": self.delete_state,
            "lineage_gaps": [{"first_offset": a, "last_offset": b} for a, b in self.gaps],
            "newest_record_timestamp_ms": self.newest_timestamp_ms,
            "newest_record_age_s": None if (age := self.newest_age_s) is None else round(age, 3),
        }


def highest_offset_per_epoch(segments: list[RemoteLogSegmentMetadata]) -> dict[int, int]:
    """Per leader epoch, the highest offset a COPY_SEGMENT_FINISHED segment holds in it."""
    out: dict[int, int] = {}
    for m in segments:
        if m.state != _FINISHED:
            continue
        epochs = list(m.segment_leader_epochs.items())
        for i, (epoch, _) in enumerate(epochs):
            end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else m.end_offset
            out[epoch] = max(out.get(epoch, end), end)
    return dict(sorted(out.items()))


def summarize_partition(
    view: MetadataView, tp: TopicIdPartition, now_ms: int | None = None
) -> PartitionSummary:
    """``tp``'s summary; the age of its newest archived record is taken at ``now_ms``
    (the clock when None)."""
    segments = view.segments(tp)
    finished = [m for m in segments if m.state == _FINISHED]
    delete = view.delete_state(tp)
    ranges = view.lineage_ranges(tp)
    newest = ranges[-1].segment.max_timestamp_ms if ranges else -1
    return PartitionSummary(
        topic_id_partition=tp,
        segment_count=len(segments),
        remote_bytes=sum(m.segment_size_in_bytes for m in segments),
        start_offset=min((m.start_offset for m in finished), default=None),
        end_offset=max((m.end_offset for m in finished), default=None),
        highest_offset_per_epoch=highest_offset_per_epoch(segments),
        state_counts=dict(sorted(Counter(m.state.name for m in segments).items())),
        delete_state=None if delete is None else delete.state.name,
        gaps=[(g.first_offset, g.last_offset) for g in lineage_gaps(ranges)],
        newest_timestamp_ms=newest if newest >= 0 else None,
        as_of_ms=int(time.time() * 1000) if now_ms is None else now_ms,
    )


def summarize_partitions(
    view: MetadataView, where: SegmentFilter | None = None, now_ms: int | None = None
) -> list[PartitionSummary]:
    """A summary of every known topic-partition (matching ``where``'s topic/partition),
    ages taken at ``now_ms`` (the clock when None), the same for all."""
    where = where or SegmentFilter()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return [
        summarize_partition(view, tp, now_ms)
        for tp in view.topic_partitions()
        if where.partition_matches(tp)
    ]


__all__ = [
    "PartitionSummary",
    "SegmentDetail",
    "SegmentFilter",
    "StoredObject",
    "check_remote_holds",
    "check_topic_known",
    "describe_segment",
    "find_segment",
    "highest_offset_per_epoch",
    "list_segments",
    "served_offsets",
    "stored_objects",
    "summarize_partition",
    "summarize_partitions",
]
