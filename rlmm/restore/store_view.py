"""A MetadataView built from the remote store alone, for when ``__remote_log_metadata`` is gone.

Job: after a disaster the cluster's metadata topic is lost with the cluster, but every
copy in the store still says what it holds: its object names give the topic, topic id,
partition, start offset and segment id; its leader-epoch checkpoint gives the epochs; its
offset and time indexes and the log's last batches give the end offset, the size and the
largest timestamp; its transaction index says whether it holds aborted transactions.
Each copy becomes one COPY_SEGMENT_FINISHED segment applied to the manager's own store,
so the archive's lineage, planner and reader work on it unchanged.

Invariants: reads only; a copy missing an object its layout requires (a copy that never
finished) or whose log does not end on a whole batch is left out and counted, never
guessed at; only the indexes and the log's tail after the last offset-index entry are
fetched per segment, never a whole log. Without the metadata there is no way to tell a
superseded copy from a live one except by the leader epochs, which the lineage does.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from remote.errors import RemoteIntegrityError, RemoteResourceNotFoundError, SegmentFormatError
from remote.layouts import LOG_LABEL, ObjectName, RemoteLayout
from remote.segments import (
    leader_epochs_in_range,
    read_leader_epoch_checkpoint,
    read_offset_index,
    read_time_index,
)
from remote.storage import IndexType, RemoteObject
from rlmm.archive import MetadataView, ViewStats
from rlmm.archive.batches import iter_batches
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.errors import RemoteStorageError
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    kafka_uuid_from_str,
)

log = logging.getLogger(__name__)
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass
class StoreListing:
    """What listing the store found: segments rebuilt, copies left out and why."""

    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line per copy left out
    topics: set[str] = field(default_factory=set)  # every topic named in the store


def _groups(
    layout: RemoteLayout, topics: Iterable[str] | None, seen: set[str]
) -> dict[tuple[str, str, int, int, str], dict[str, RemoteObject]]:
    wanted = None if topics is None else set(topics)
    out: dict[tuple[str, str, int, int, str], dict[str, RemoteObject]] = {}
    for obj in layout.list_objects():
        name: ObjectName | None = layout.parse_object_name(obj.name)
        if name is None or name.temporary:
            continue
        seen.add(name.topic)
        if wanted is not None and name.topic not in wanted:
            continue
        key = (name.topic, name.topic_id, name.partition, name.start_offset, name.segment_id)
        out.setdefault(key, {})[name.label] = obj
    return out


def _rebuild(
    layout: RemoteLayout,
    key: tuple[str, str, int, int, str],
    objects: dict[str, RemoteObject],
) -> RemoteLogSegmentMetadata | str:
    """The segment's metadata, or why the copy is left out."""
    topic, topic_id, partition, start, segment_id = key
    log_object = objects.get(LOG_LABEL)
    where = f"{topic}-{partition} segment {segment_id} at offset {start}"
    if log_object is None:
        return f"{where}: no log object"
    tp = TopicIdPartition(kafka_uuid_from_str(topic_id), topic, partition)
    sid = RemoteLogSegmentId(tp, kafka_uuid_from_str(segment_id))
    # Provisional values: the layouts name and fetch objects from the ids and the start
    # offset; the size bounds nothing they fetch from an offset-index position on.
    provisional = RemoteLogSegmentMetadata(
        sid, start, start, -1, -1, log_object.last_modified_ms, log_object.size,
        {0: start}, _FINISHED, None, txn_index_empty=True,
    )  # fmt: skip
    try:
        required = {o.label for o in layout.segment_objects(provisional) if o.required}
        missing = sorted(required - set(objects) - {LOG_LABEL})
        if missing:
            return f"{where}: incomplete copy (no {', '.join(missing)})"
        entries = read_offset_index(
            layout.fetch_index(provisional, IndexType.OFFSET),
            start,
            name=layout.index_object_name(provisional, IndexType.OFFSET),
        )
        position = entries[-1].position if entries else 0
        with layout.fetch_log_segment(provisional, position) as stream:
            tail = stream.read()
        last_offset, max_ts, end = -1, -1, position
        for header, _data in iter_batches(
            io.BytesIO(tail), position, segment_id=segment_id,
            object_name=layout.log_object_name(provisional),
        ):  # fmt: skip
            last_offset = header.last_offset
            max_ts = max(max_ts, header.max_timestamp)
            end = header.position + header.size_in_bytes
        if last_offset < start or end != position + len(tail):
            return f"{where}: the log does not end on a whole batch (truncated copy?)"
        times = read_time_index(
            layout.fetch_index(provisional, IndexType.TIMESTAMP),
            start,
            name=layout.index_object_name(provisional, IndexType.TIMESTAMP),
        )
        if times:
            max_ts = max(max_ts, max(t.timestamp for t in times))
        checkpoint = read_leader_epoch_checkpoint(
            layout.fetch_index(provisional, IndexType.LEADER_EPOCH),
            name=layout.index_object_name(provisional, IndexType.LEADER_EPOCH),
        )
        epochs = leader_epochs_in_range(checkpoint, start, last_offset + 1) or {0: start}
        try:
            txn_index = layout.fetch_index(provisional, IndexType.TRANSACTION)
        except RemoteResourceNotFoundError:
            txn_index = b""
    except (RemoteIntegrityError, SegmentFormatError) as e:
        return f"{where}: unreadable: {e}"
    except RemoteResourceNotFoundError as e:
        return f"{where}: incomplete copy ({e})"
    return RemoteLogSegmentMetadata(
        sid, start, last_offset, max_ts, -1, log_object.last_modified_ms, end, epochs,
        _FINISHED, None, txn_index_empty=not txn_index,
    )  # fmt: skip


def list_store_segments(layout: RemoteLayout, topics: Iterable[str] | None = None) -> StoreListing:
    """Every finished-looking copy in the store (of ``topics``, None: all), rebuilt."""
    listing = StoreListing()
    for key, objects in sorted(_groups(layout, topics, listing.topics).items()):
        found = _rebuild(layout, key, objects)
        if isinstance(found, str):
            log.warning("left out: %s", found)
            listing.skipped.append(found)
        else:
            listing.segments.append(found)
    return listing


def store_metadata_view(
    layout: RemoteLayout, topics: Iterable[str] | None = None
) -> tuple[MetadataView, StoreListing]:
    """A read-only MetadataView of the store's copies, with what listing them found."""
    listing = list_store_segments(layout, topics)
    store = RemotePartitionMetadataStore()
    stats = ViewStats()
    # Older copies first: where two copies of one epoch start at one offset (a retried
    # copy whose first attempt leaked), the cache keeps the later, as it would have.
    for metadata in sorted(listing.segments, key=lambda m: m.event_timestamp_ms):
        started = RemoteLogSegmentMetadata(
            metadata.remote_log_segment_id, metadata.start_offset, metadata.end_offset,
            metadata.max_timestamp_ms, -1, metadata.event_timestamp_ms,
            metadata.segment_size_in_bytes, metadata.segment_leader_epochs,
            RemoteLogSegmentState.COPY_SEGMENT_STARTED, None,
            txn_index_empty=metadata.txn_index_empty,
        )  # fmt: skip
        finished = RemoteLogSegmentMetadataUpdate(
            metadata.remote_log_segment_id, metadata.event_timestamp_ms, None, _FINISHED, -1
        )
        try:
            store.apply(started)
            store.apply(finished)
        except RemoteStorageError as e:
            stats.skipped_invalid += 1
            listing.skipped.append(f"{metadata.remote_log_segment_id}: {e}")
            log.warning("left out %s: %s", metadata.remote_log_segment_id, e)
            continue
        stats.replayed_events += 2
    return MetadataView(store, {}, 0, stats), listing


__all__ = ["StoreListing", "list_store_segments", "store_metadata_view"]
