"""A MetadataView built from the remote store alone, for when ``__remote_log_metadata`` is gone.

Job: after a disaster the cluster's metadata topic is lost with the cluster, but every
copy in the store still says what it holds: its object names give the topic, topic id,
partition, start offset and segment id; its leader-epoch checkpoint gives the epochs; its
offset and time indexes and the log's last batches give the end offset, the size and the
largest timestamp; its transaction index says whether it holds aborted transactions.
Each copy becomes one COPY_SEGMENT_FINISHED segment applied to the manager's own store,
so the archive's lineage, planner and reader work on it unchanged.

Where rlmm's own snapshots of the metadata are readable (``snapshots``: with
``[snapshot] store = "s3"`` they sit in the bucket beside the segments), a copy that the
newest snapshot holding its partition says is COPY_SEGMENT_FINISHED takes its offsets,
timestamp, size, epochs and transaction-index flag from there, and none of its objects
is read; the copies no snapshot holds as finished (added after it, or mid-copy then)
are rebuilt from their objects as above.

Invariants: reads only; a copy missing an object its layout requires (a copy that never
finished) or whose log does not end on a whole batch is left out and counted, never
guessed at; only the indexes and the log's tail after the last offset-index entry are
fetched per segment, never a whole log. A snapshot only stands in for the objects
listed now, each with the values the metadata gave it, so the view is the one the
objects alone give; one that cannot be read (truncated, corrupt, or a block of it that
does not decode) is warned about by name and the objects are read instead, never an
error. Without the metadata there is no way to tell a superseded copy from a live one
except by the leader epochs, which the lineage does.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from collections.abc import Iterable, Mapping
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
from rlmm.archive.batches import iter_batches
from rlmm.archive.view import MetadataView, ViewStats
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.errors import RemoteStorageError, SnapshotBlockError
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    kafka_uuid_from_str,
)
from snapshot import Snapshot, SnapshotError, SnapshotStore

log = logging.getLogger(__name__)
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass
class StoreListing:
    """What listing the store found: segments rebuilt, copies left out and why."""

    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line per copy left out
    topics: set[str] = field(default_factory=set)  # every topic named in the store
    from_snapshot: int = 0  # segments whose values a snapshot gave (no object read)
    snapshots: list[str] = field(default_factory=list)  # the snapshots that gave any


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


# What a snapshot may not be read past: any of these from decoding its state or a block
# of it means the snapshot is unusable, not the store (as ``rlmm snapshot inspect``).
_UNREADABLE_STATE = (ValueError, TypeError, KeyError, IndexError, SnapshotBlockError)


def _finished_in(
    snap: Snapshot, location: str, wanted: set[TopicIdPartition]
) -> dict[TopicIdPartition, dict[RemoteLogSegmentId, RemoteLogSegmentMetadata]]:
    """The COPY_SEGMENT_FINISHED segments the snapshot holds of each ``wanted`` partition
    it has (only those partitions' blocks are decoded)."""
    store = RemotePartitionMetadataStore()
    store.load_state(snap.state, source=location)
    out = {}
    for tp in wanted & set(store.caches):
        cache = store.caches[tp]
        out[tp] = {
            m.remote_log_segment_id: m for m in cache.segments.values() if m.state == _FINISHED
        }
    return out


def _snapshot_segments(
    snapshots: SnapshotStore, wanted: set[TopicIdPartition], listing: StoreListing
) -> dict[RemoteLogSegmentId, RemoteLogSegmentMetadata]:
    """Finished segments of ``wanted`` partitions, each partition's from the newest
    valid snapshot (of any owner) that holds it; {} when there is none."""
    found: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
    todo = set(wanted)
    try:
        # The store warns about (and skips) every snapshot whose frame does not check.
        for location, snap in snapshots.iter_valid(all_owners=True):
            try:
                held = _finished_in(snap, location, todo)
            except _UNREADABLE_STATE as e:
                log.warning(
                    "snapshot %s left out (the store's objects are read instead): %s",
                    location, e,
                )  # fmt: skip
                continue
            for tp, segments in held.items():
                todo.discard(tp)
                found.update(segments)
            if held:
                listing.snapshots.append(location)
            if not todo:
                break
    except SnapshotError as e:
        log.warning(
            "cannot read snapshots from %r (the store's objects are read): %s", snapshots, e
        )
    return found


def _from_snapshot(
    layout: RemoteLayout,
    key: tuple[str, str, int, int, str],
    objects: dict[str, RemoteObject],
    known: Mapping[RemoteLogSegmentId, RemoteLogSegmentMetadata],
) -> RemoteLogSegmentMetadata | None:
    """The copy's metadata from a snapshot, as ``_rebuild`` makes it from the objects;
    None when no snapshot holds it finished or an object it requires is not listed
    (``_rebuild`` then reads the objects, or says why the copy is left out)."""
    topic, topic_id, partition, start, segment_id = key
    tp = TopicIdPartition(kafka_uuid_from_str(topic_id), topic, partition)
    sid = RemoteLogSegmentId(tp, kafka_uuid_from_str(segment_id))
    held = known.get(sid)
    log_object = objects.get(LOG_LABEL)
    if held is None or held.start_offset != start or log_object is None:
        return None
    # The fields _rebuild cannot know from the objects are its: same view either way.
    metadata = dataclasses.replace(
        held, broker_id=-1, event_timestamp_ms=log_object.last_modified_ms,
        custom_metadata=None,
    )  # fmt: skip
    try:
        required = {o.label for o in layout.segment_objects(metadata) if o.required}
    except RemoteStorageError:
        return None
    return None if required - set(objects) else metadata


def list_store_segments(
    layout: RemoteLayout,
    topics: Iterable[str] | None = None,
    snapshots: SnapshotStore | None = None,
) -> StoreListing:
    """Every finished-looking copy in the store (of ``topics``, None: all), rebuilt, or
    taken from the newest of ``snapshots`` that holds it finished."""
    listing = StoreListing()
    groups = _groups(layout, topics, listing.topics)
    known: Mapping[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
    if snapshots is not None and groups:
        wanted = {
            TopicIdPartition(kafka_uuid_from_str(topic_id), topic, partition)
            for topic, topic_id, partition, _, _ in groups
        }
        known = _snapshot_segments(snapshots, wanted, listing)
    for key, objects in sorted(groups.items()):
        held = _from_snapshot(layout, key, objects, known)
        if held is not None:
            listing.from_snapshot += 1
            listing.segments.append(held)
            continue
        found = _rebuild(layout, key, objects)
        if isinstance(found, str):
            log.warning("left out: %s", found)
            listing.skipped.append(found)
        else:
            listing.segments.append(found)
    if listing.from_snapshot:
        log.info(
            "%d of %d segments from rlmm's snapshots (%s), the others from their objects",
            listing.from_snapshot, len(listing.segments), ", ".join(listing.snapshots),
        )  # fmt: skip
    return listing


def store_metadata_view(
    layout: RemoteLayout,
    topics: Iterable[str] | None = None,
    snapshots: SnapshotStore | None = None,
) -> tuple[MetadataView, StoreListing]:
    """A read-only MetadataView of the store's copies, with what listing them found
    (``snapshots``: where rlmm's snapshots may give copies' values; see the module)."""
    listing = list_store_segments(layout, topics, snapshots)
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
        stats.applied_events += 2
    return MetadataView(store, {}, 0, stats), listing


__all__ = ["StoreListing", "list_store_segments", "store_metadata_view"]
