"""plan_slices: from a ReadRequest and the metadata view to a list of picklable Slices.

Job (on the driver): pick the topic-partitions, turn offset and timestamp bounds into
offsets per partition (Spark's Kafka-source meanings), walk each partition's lineage
(rlmm.archive.lineage), drop whole segments outside the bounds by their metadata
alone, narrow the rest to byte ranges with the segment's offset index, split large
ranges at offset-index positions into slices of at most ``max_slice_bytes``, and
attach the aborted transactions each slice needs under read_committed.

Invariants: slices of one partition are in offset order and their offset ranges
tile the requested range without overlap (no record twice); a split is made only at
an offset-index entry, where one batch ends and the next begins; a gap inside the
requested range, or bounds outside the archive, raise DataLossError (or are skipped
and logged when fail_on_data_loss is false); no object is fetched for a segment the
bounds exclude, and a wholly wanted segment that fits one slice is planned from its
metadata alone.

A query's filter (``request.where``, RowBounds) only removes records the filter
drops: partitions it names none of, offsets outside its range, segments whose max
timestamp is below its lower timestamp bound, segments whose smallest timestamp is
above its upper timestamp bound, and the start of the first segment left, up to the
time index's entry below that bound. It is applied after the offsets and timestamps
of the options are checked, so a read that fails (a gap, an offset outside the
archive) fails the same with or without it. Kafka records no segment's smallest
timestamp and timestamps need not grow with offsets: a segment is dropped by the
upper bound only when its smallest timestamp is known (rlmm's manifest, or rlmm's
side index: rlmm.archive.smallest_timestamps), else it is read and each record
checked. A known smallest timestamp never changes where a timestamp option resolves
to: it only spares the time index fetch of a segment wholly at or after it.
"""

from __future__ import annotations

import itertools
import logging
import re
import struct
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.legacy_records import LegacyRecordBatch

from remote import IndexType
from remote.errors import RemoteResourceNotFoundError
from remote.layouts import RemoteLayout
from remote.segments import (
    AbortedTxn,
    OffsetIndexEntry,
    lookup_offset,
    read_offset_index,
    read_producer_snapshot,
    read_time_index,
    read_txn_index,
)
from remote.segments.batch import RecordBatchHeader
from remote.segments.compressed import bounded_batch
from rlmm.archive.batches import iter_batches
from rlmm.archive.errors import ArchiveError, DataLossError
from rlmm.archive.lineage import LineageRange, gaps
from rlmm.archive.request import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    PartitionKey,
    ReadRequest,
    Slice,
    TimestampSpec,
)
from rlmm.archive.smallest_timestamps import SmallestTimestamps
from rlmm.archive.storage import remote_storage_for
from rlmm.archive.view import MetadataView
from rlmm.archive.where import RowBounds
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    kafka_uuid_to_str,
)

log = logging.getLogger(__name__)

# Offset int64, length int32, CRC or leader epoch int32, magic int8, v0/v1 attributes int8.
_SPLIT_HEADER = struct.Struct(">qi4xbb")


def select_partitions(view: MetadataView, request: ReadRequest) -> list[TopicIdPartition]:
    """The topic-partitions the request names, sorted; unknown names raise ArchiveError."""
    known = view.topic_partitions()
    by_topic: dict[str, list[TopicIdPartition]] = {}
    for tp in known:
        by_topic.setdefault(tp.topic, []).append(tp)
    chosen: list[TopicIdPartition] = []
    if request.pattern is not None:
        try:
            regex = re.compile(request.pattern)
        except re.error as e:
            raise ArchiveError(f"pattern {request.pattern!r} is not a valid regex: {e}") from e
        for topic in sorted(by_topic):
            if regex.fullmatch(topic):
                chosen += by_topic[topic]
    elif request.partitions is not None:
        for topic, ps in request.partitions.items():
            have = {tp.partition: tp for tp in by_topic.get(topic, [])}
            missing = [p for p in ps if p not in have]
            if missing:
                raise ArchiveError(
                    f"partitions {missing} of topic {topic!r} are not in the archive"
                    f" (it has {sorted(have) or 'none'})"
                )
            chosen += [have[p] for p in ps]
    else:
        for topic in request.topics:
            if topic not in by_topic:
                raise ArchiveError(
                    f"topic {topic!r} is not in the archive (known: {sorted(by_topic) or 'none'})"
                )
            chosen += by_topic[topic]
    seen: dict[PartitionKey, TopicIdPartition] = {}
    for tp in chosen:
        other = seen.setdefault((tp.topic, tp.partition), tp)
        if other.topic_id != tp.topic_id:
            raise ArchiveError(
                f"{tp.topic}-{tp.partition} is archived under two topic ids ({other.topic_id},"
                f" {tp.topic_id}): the topic was deleted and recreated"
            )
    return sorted(set(chosen), key=lambda tp: (tp.topic, tp.partition))


def _for_partition(spec: TimestampSpec | None, key: PartitionKey) -> int | None:
    if spec is None or isinstance(spec, int):
        return spec
    return spec.get(key)


class _Planner:
    """Plans one request; caches the indexes it fetched (one fetch per index at most)."""

    def __init__(
        self,
        request: ReadRequest,
        layout: RemoteLayout,
        remote_options: Mapping[str, Any],
        side_index: str | None = None,
    ) -> None:
        self.request = request
        self.layout = layout
        self.remote_options = dict(remote_options)
        self.side_index = side_index
        self.smallest = SmallestTimestamps(layout, side_index, self.remote_options)
        self._offset_indexes: dict[RemoteLogSegmentId, list[OffsetIndexEntry]] = {}

    # ---- losses ------------------------------------------------------------------------

    def lost(self, message: str) -> None:
        if self.request.fail_on_data_loss:
            raise DataLossError(message)
        log.warning("%s (skipped: fail_on_data_loss is false)", message)

    # ---- indexes ------------------------------------------------------------------------

    def offset_index(self, segment: RemoteLogSegmentMetadata) -> list[OffsetIndexEntry]:
        entries = self._offset_indexes.get(segment.remote_log_segment_id)
        if entries is None:
            data = self.layout.fetch_index(segment, IndexType.OFFSET)
            entries = read_offset_index(
                data,
                segment.start_offset,
                name=self.layout.index_object_name(segment, IndexType.OFFSET),
            )
            self._offset_indexes[segment.remote_log_segment_id] = entries
        return entries

    def aborted_transactions(
        self, ranges: list[LineageRange], start: int, end: int
    ) -> list[AbortedTxn]:
        """Aborted txns overlapping [start, end): Kafka's walk over the txn indexes from
        the first segment read on (a marker may sit in a later segment), until one
        entry's last stable offset reaches ``end``."""
        out: list[AbortedTxn] = []
        for r in ranges:
            if r.last_offset < start or r.segment.txn_index_empty:
                continue
            segment = r.segment
            try:
                data = self.layout.fetch_index(segment, IndexType.TRANSACTION)
            except RemoteResourceNotFoundError as e:
                raise DataLossError(
                    f"segment {kafka_uuid_to_str(segment.remote_log_segment_id.id)} has aborted"
                    f" transactions but its transaction index cannot be read: {e}"
                ) from e
            complete = False
            for txn in read_txn_index(
                data, name=self.layout.index_object_name(segment, IndexType.TRANSACTION)
            ):
                if txn.last_offset >= start and txn.first_offset < end:
                    out.append(txn)
                complete = complete or txn.last_stable_offset >= end
            if complete:
                break
        return out

    def base_offset_at(self, segment: RemoteLogSegmentMetadata, position: int) -> int | None:
        """First offset of the batch at ``position`` (an offset-index position), where a
        split there passes from one slice to the next; None when the batch does not
        say (a compressed magic 0/1 wrapper carries only its last offset)."""
        with self.layout.fetch_log_segment(segment, position, position + 17) as f:
            data = f.read()
        if len(data) < 18:
            raise DataLossError(
                f"segment {kafka_uuid_to_str(segment.remote_log_segment_id.id)}: object"
                f" {self.layout.log_object_name(segment)} ends inside the batch header at byte"
                f" position {position} (its offset index points there)"
            )
        offset, _, magic, legacy_attributes = _SPLIT_HEADER.unpack(data)
        if magic < 2 and legacy_attributes & 0x07:
            return None
        return int(offset)

    def last_stable_offset(self, segment: RemoteLogSegmentMetadata) -> int | None:
        """First offset of the earliest transaction still open at the end of ``segment``
        (from the producer snapshot copied with it), or None when none is open."""
        try:
            data = self.layout.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT)
        except RemoteResourceNotFoundError:
            return None
        entries = read_producer_snapshot(
            data, name=self.layout.index_object_name(segment, IndexType.PRODUCER_SNAPSHOT)
        )
        open_txns = [e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0]
        return min(open_txns) if open_txns else None

    # ---- timestamps ---------------------------------------------------------------------

    def offset_for_timestamp(self, ranges: list[LineageRange], timestamp: int) -> int | None:
        """First offset on the lineage whose record timestamp is >= ``timestamp``
        (Kafka's ListOffsets by timestamp over remote segments)."""
        for r in ranges:
            if r.segment.max_timestamp_ms < timestamp:
                continue  # pruned by its metadata: nothing fetched
            found = self._offset_in_segment(r, timestamp)
            if found is not None:
                return found
        return None

    def time_index_floor(self, r: LineageRange, timestamp: int) -> int:
        """An offset of ``r`` before which no record has a timestamp >= ``timestamp``:
        the time index's last entry below it (an entry is the largest timestamp so far
        in the segment and the offset holding it, so no record up to that offset
        reaches ``timestamp``)."""
        segment = r.segment
        entries = read_time_index(
            self.layout.fetch_index(segment, IndexType.TIMESTAMP),
            segment.start_offset,
            name=self.layout.index_object_name(segment, IndexType.TIMESTAMP),
        )
        i = bisect_left([e.timestamp for e in entries], timestamp)
        return max(entries[i - 1].offset if i else segment.start_offset, r.first_offset)

    def _offset_in_segment(self, r: LineageRange, timestamp: int) -> int | None:
        segment = r.segment
        smallest = self.smallest.of(segment)
        if smallest is not None and smallest >= timestamp:
            # Every time index entry is a record's timestamp, so none is below
            # ``timestamp``: the floor is the range's first offset, without the fetch.
            not_before = r.first_offset
        else:
            not_before = self.time_index_floor(r, timestamp)
        position = lookup_offset(self.offset_index(segment), not_before)
        name = self.layout.log_object_name(segment)
        with self.layout.fetch_log_segment(segment, position) as stream:
            for header, data in iter_batches(
                stream,
                position,
                segment_id=kafka_uuid_to_str(segment.remote_log_segment_id.id),
                object_name=name,
            ):
                if header.base_offset > r.last_offset:
                    return None
                if header.last_offset < not_before or header.max_timestamp < timestamp:
                    continue
                for offset, ts in _record_times(header, data):
                    if offset >= not_before and ts >= timestamp and offset <= r.last_offset:
                        return offset
        return None

    # ---- bounds ---------------------------------------------------------------------------

    def bounds(self, tp: TopicIdPartition, ranges: list[LineageRange]) -> tuple[int, int] | None:
        """[start, end) to read of ``tp``, checked against the archive; None: nothing."""
        request = self.request
        key = (tp.topic, tp.partition)
        earliest, latest = ranges[0].first_offset, ranges[-1].last_offset + 1
        stable = latest  # where "latest" is for this isolation level
        if request.isolation_level == READ_COMMITTED:
            # Kafka's read_committed consumer stops at the last stable offset: records of
            # a transaction still open at the archive's end (and all after) are undecided.
            lso = self.last_stable_offset(ranges[-1].segment)
            if lso is not None and lso < latest:
                stable = max(lso, earliest)
        start_ts = _for_partition(request.starting_timestamp_ms, key)
        end_ts = _for_partition(request.ending_timestamp_ms, key)
        if start_ts is not None:
            found = self.offset_for_timestamp(ranges, start_ts)
            if found is None and request.starting_timestamp_strategy == "error":
                raise ArchiveError(
                    f"{tp.topic}-{tp.partition}: no record with a timestamp >= {start_ts}"
                    f" (starting timestamp) in the archive"
                )
            start = stable if found is None else found
        else:
            start = (request.starting_offsets or {}).get(key, EARLIEST)
            start = earliest if start == EARLIEST else start
        if end_ts is not None:
            found = self.offset_for_timestamp(ranges, end_ts)
            end = stable if found is None else found
        else:
            end = (request.ending_offsets or {}).get(key, LATEST)
            end = stable if end == LATEST else end
        where = f"{tp.topic}-{tp.partition}"
        if stable < end <= latest:
            log.info(
                "%s: read_committed stops at the last stable offset %d, not %d: a transaction"
                " is still open at the end of the archive",
                where,
                stable,
                end,
            )
            end = stable
            start = min(start, end)
        if start > end:
            raise ArchiveError(f"{where}: starting offset {start} is after ending offset {end}")
        if start < earliest:
            self.lost(
                f"{where}: offsets [{start}, {min(end, earliest)}) are not in the archive"
                f" (it starts at {earliest})"
            )
            start = min(earliest, end)
        if end > latest:
            self.lost(
                f"{where}: offsets [{max(start, latest)}, {end}) are not in the archive"
                f" (it ends before {latest})"
            )
            end = max(latest, start)
        for gap in gaps(ranges):
            if gap.first_offset < end and gap.last_offset >= start:
                self.lost(
                    f"{where}: offsets [{gap.first_offset}, {gap.last_offset + 1}) are missing"
                    " from the archive"
                    " (no COPY_SEGMENT_FINISHED segment on the leader-epoch lineage holds them)"
                )
        return (start, end) if start < end else None

    # ---- slices ---------------------------------------------------------------------------

    def slices(self, tp: TopicIdPartition, ranges: list[LineageRange]) -> Iterator[Slice]:
        bounds = self.bounds(tp, ranges)
        if bounds is None:
            return
        start, end = bounds
        where = self.request.where
        if where is not None:  # after bounds(): the filter never changes what fails
            if where.min_offset is not None:
                start = max(start, where.min_offset)
            if where.max_offset is not None:
                end = min(end, where.max_offset + 1)
            if start >= end:
                return
        min_ts = None if where is None else where.min_timestamp_ms
        max_ts = None if where is None else where.max_timestamp_ms
        aborted: list[AbortedTxn] = []
        if self.request.isolation_level == READ_COMMITTED:
            aborted = self.aborted_transactions(ranges, start, end)
        narrowed = False
        for r in ranges:
            lo, hi = max(r.first_offset, start), min(r.last_offset + 1, end)
            if lo >= hi:
                continue  # pruned by offsets: nothing fetched
            smallest = self.smallest.of(r.segment) if max_ts is not None else None
            if smallest is not None and max_ts is not None and smallest > max_ts:
                continue  # every record is newer than the filter keeps: nothing fetched
            if min_ts is not None:
                if r.segment.max_timestamp_ms < min_ts:
                    continue  # every record is older than the filter keeps: nothing fetched
                if not narrowed:
                    # The first segment left is where the window usually starts; later
                    # ones are mostly newer (their batches before it are skipped unread
                    # by the reader), so one time-index fetch per partition.
                    narrowed = True
                    lo = max(lo, self.time_index_floor(r, min_ts))
                    if lo >= hi:
                        continue
            learn = None
            if self.side_index is not None and self.smallest.of(r.segment) is None:
                learn = self.side_index  # the reader records what it sees of the segment
            for first, until, begin, finish in self._pieces(r.segment, lo, hi):
                txns = tuple(
                    (t.producer_id, t.first_offset, t.last_offset)
                    for t in aborted
                    if t.last_offset >= first and t.first_offset < until
                )
                yield Slice(
                    topic=tp.topic,
                    partition=tp.partition,
                    segment=r.segment,
                    start_position=begin,
                    end_position=finish,
                    from_offset=first,
                    until_offset=until,
                    remote_options=self.remote_options,
                    isolation_level=self.request.isolation_level,
                    aborted_transactions=txns,
                    include_headers=self.request.include_headers,
                    fail_on_data_loss=self.request.fail_on_data_loss,
                    min_timestamp_ms=min_ts,
                    max_timestamp_ms=max_ts,
                    side_index=learn,
                )

    def _pieces(
        self, segment: RemoteLogSegmentMetadata, lo: int, hi: int
    ) -> list[tuple[int, int, int, int]]:
        """(from offset, until offset, start position, end position) of each slice."""
        size = segment.segment_size_in_bytes
        limit = self.request.max_slice_bytes
        whole = lo == segment.start_offset and hi == segment.end_offset + 1
        if whole and size <= limit:
            return [(lo, hi, 0, size)]
        entries = self.offset_index(segment)
        begin = lookup_offset(entries, lo)
        j = bisect_left([e.offset for e in entries], hi - 1)
        finish = entries[j + 1].position if j + 1 < len(entries) else size
        positions = [begin]
        current, candidate = begin, None
        for entry in entries:
            position = entry.position
            if position <= begin:
                continue
            if position >= finish or entry.offset >= hi:
                break
            if position - current > limit and candidate is not None:
                positions.append(candidate)
                current, candidate = candidate, None
            if position - current > limit:
                positions.append(position)  # one index interval above the limit
                current = position
                continue
            candidate = position
        if finish - current > limit and candidate is not None:
            positions.append(candidate)
        # Each cut moves to the next slice at the first offset of the batch there.
        cuts = [(begin, lo)]
        for position in positions[1:]:
            offset = self.base_offset_at(segment, position)
            if offset is not None and cuts[-1][1] < offset < hi:
                cuts.append((position, offset))
        cuts.append((finish, hi))
        return [
            (first, until, start, end) for (start, first), (end, until) in itertools.pairwise(cuts)
        ]


def _record_times(header: RecordBatchHeader, data: memoryview) -> Iterator[tuple[int, int]]:
    magic = header.magic
    records = bounded_batch(header, data)
    if magic >= 2:
        batch = DefaultRecordBatch(records)
        if header.attributes & 0x08:  # LogAppendTime: every record has the batch's max timestamp
            max_ts = batch.max_timestamp
            for r in batch:
                yield r.offset, max_ts
            return
        for r in batch:
            yield r.offset, r.timestamp
        return
    for r in LegacyRecordBatch(bytes(records), magic):
        yield r.offset, -1 if r.timestamp is None else r.timestamp


def plan_slices(
    view: MetadataView,
    request: ReadRequest,
    remote_options: Mapping[str, Any],
    *,
    layout: RemoteLayout | None = None,
    side_index: str | None = None,
) -> list[Slice]:
    """Slices covering the request, partition by partition, each in offset order.

    ``side_index`` (``RlmmConfig.side_index_location()``) is where smallest timestamps
    that segments' writers did not record are looked up, and learned by the readers."""
    planner = _Planner(
        request, layout or remote_storage_for(remote_options), remote_options, side_index
    )
    out: list[Slice] = []
    where = request.where or RowBounds()
    for tp in select_partitions(view, request):
        ranges = view.lineage_ranges(tp)
        if not ranges:
            log.info("%s has no finished segment in the archive", tp)
            continue
        if not where.keeps_partition(tp.topic, tp.partition):
            # The filter drops every record of it: no slice, but the same checks (and
            # failures) as without the filter.
            planner.bounds(tp, ranges)
            continue
        out.extend(planner.slices(tp, ranges))
    return out


__all__ = ["plan_slices", "select_partitions"]
