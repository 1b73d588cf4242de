"""Metadata of every user partition seen on the consumed metadata partitions.

Kafka's RemotePartitionMetadataStore: one RemoteLogMetadataCache per user partition
plus partition-delete states. Invariant: :meth:`check` and :meth:`apply` accept and
reject exactly the same events, and a rejected event changes nothing — so the write
path can validate before publishing and the apply loop can skip what replay rejects.
Once a partition's delete reaches DELETE_PARTITION_FINISHED its segments are gone and
only the delete record remains (reads then raise RemoteResourceNotFoundError).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from rlmm.cache import RemoteLogMetadataCache
from rlmm.errors import InvalidStateTransitionError, RemoteResourceNotFoundError
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    check_partition_delete_transition,
)

_FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
_REMEMBERED_DELETES = 100_000


def _same_segment(a: RemoteLogSegmentMetadata, b: RemoteLogSegmentMetadata) -> bool:
    """Same segment copy: the fields no update can change are equal."""
    return (
        a.start_offset == b.start_offset
        and a.end_offset == b.end_offset
        and a.max_timestamp_ms == b.max_timestamp_ms
        and a.segment_size_in_bytes == b.segment_size_in_bytes
        and a.segment_leader_epochs == b.segment_leader_epochs
        and a.txn_index_empty == b.txn_index_empty
    )


class RemotePartitionMetadataStore:
    """Caches of all user partitions known to one manager, keyed by TopicIdPartition."""

    def __init__(self) -> None:
        self.caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self.delete_states: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        # Recently finished deletes, to recognise a redelivered DELETE_SEGMENT_FINISHED.
        self._deleted: OrderedDict[RemoteLogSegmentId, None] = OrderedDict()

    def is_redelivery(self, event: RemoteLogMetadata) -> bool:
        """True for a second copy of an event that already took effect.

        A non-idempotent producer retrying after a lost acknowledgement (Kafka, a
        broker restart) stores a record twice. The copy must not be reported as a
        failure to the writer whose write did take effect: an add of a segment that
        exists with the same immutable fields, or a DELETE_SEGMENT_FINISHED of a
        segment that was just deleted.
        """
        if isinstance(event, RemoteLogSegmentMetadata):
            cache = self.caches.get(event.topic_id_partition)
            existing = cache.segments.get(event.remote_log_segment_id) if cache else None
            return existing is not None and _same_segment(existing, event)
        if (
            isinstance(event, RemoteLogSegmentMetadataUpdate)
            and event.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
        ):
            return event.remote_log_segment_id in self._deleted
        return False

    # ---- write side ------------------------------------------------------------------

    def check(self, event: RemoteLogMetadata) -> None:
        """Raise what :meth:`apply` would raise for ``event``; change nothing."""
        tp = event.topic_id_partition
        if isinstance(event, RemotePartitionDeleteMetadata):
            current = self.delete_states.get(tp)
            check_partition_delete_transition(current.state if current else None, event.state, tp)
            return
        self._check_not_deleted(tp, event)
        if isinstance(event, RemoteLogSegmentMetadata):
            (self.caches.get(tp) or RemoteLogMetadataCache(tp)).check_add(event)
        else:
            self._existing(tp, event).check_update(event)

    def apply(self, event: RemoteLogMetadata) -> None:
        """Apply one event; an illegal one raises and leaves the store unchanged."""
        tp = event.topic_id_partition
        if isinstance(event, RemotePartitionDeleteMetadata):
            self.check(event)
            self.delete_states[tp] = event
            if event.state == _FINISHED:
                self.caches.pop(tp, None)
            return
        self._check_not_deleted(tp, event)
        if isinstance(event, RemoteLogSegmentMetadata):
            cache = self.caches.get(tp)
            if cache is None:
                cache = RemoteLogMetadataCache(tp)
                cache.check_add(event)
                self.caches[tp] = cache
            cache.add_copy_in_progress_segment(event)
        else:
            self._existing(tp, event).update_remote_log_segment_metadata(event)
            if event.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                self._deleted[event.remote_log_segment_id] = None
                if len(self._deleted) > _REMEMBERED_DELETES:
                    self._deleted.popitem(last=False)

    def _existing(
        self, tp: TopicIdPartition, event: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogMetadataCache:
        cache = self.caches.get(tp)
        if cache is None:
            raise RemoteResourceNotFoundError(
                f"no remote log segment {event.remote_log_segment_id}"
            )
        return cache

    def _check_not_deleted(self, tp: TopicIdPartition, event: RemoteLogMetadata) -> None:
        delete = self.delete_states.get(tp)
        if delete is not None and delete.state == _FINISHED:
            raise InvalidStateTransitionError(
                f"partition {tp} was deleted (DELETE_PARTITION_FINISHED); "
                f"event {type(event).__name__} refused"
            )

    # ---- read side ---------------------------------------------------------------------

    def is_deleted(self, tp: TopicIdPartition) -> bool:
        delete = self.delete_states.get(tp)
        return delete is not None and delete.state == _FINISHED

    def partitions(self) -> set[TopicIdPartition]:
        return set(self.caches) | set(self.delete_states)

    def drop(self, keep: Callable[[TopicIdPartition], bool]) -> None:
        """Forget every partition for which ``keep`` is false."""
        for tp in [tp for tp in self.partitions() if not keep(tp)]:
            self.caches.pop(tp, None)
            self.delete_states.pop(tp, None)

    # ---- snapshot state --------------------------------------------------------------------

    def to_state(self, tps: Iterable[TopicIdPartition]) -> list[Any]:
        """msgpack-ready copy of the given partitions (caches and delete states)."""
        out: list[Any] = []
        for tp in tps:
            cache = self.caches.get(tp)
            delete = self.delete_states.get(tp)
            out.append(
                [
                    tp.topic_id.bytes,
                    tp.topic,
                    tp.partition,
                    cache.to_state() if cache is not None else None,
                    None
                    if delete is None
                    else [int(delete.state), delete.event_timestamp_ms, delete.broker_id],
                ]
            )
        return out

    def load_state(self, state: Iterable[Any]) -> None:
        """Add the partitions of a :meth:`to_state` copy (replacing what is there)."""
        for topic_id, topic, partition, cache_state, delete in state:
            tp = TopicIdPartition(uuid.UUID(bytes=topic_id), topic, partition)
            self.caches.pop(tp, None)
            self.delete_states.pop(tp, None)
            if cache_state is not None:
                self.caches[tp] = RemoteLogMetadataCache.from_state(tp, cache_state)
            if delete is not None:
                self.delete_states[tp] = RemotePartitionDeleteMetadata(
                    tp, RemotePartitionDeleteState(delete[0]), delete[1], delete[2]
                )

    def fingerprint(self, tps: Iterable[TopicIdPartition] | None = None) -> Any:
        """Order-independent view of the state, for comparisons (tests, verification)."""
        chosen = self.partitions() if tps is None else set(tps)
        out = []
        for tp in sorted(chosen, key=lambda t: (t.topic_id.int, t.partition)):
            cache = self.caches.get(tp)
            delete = self.delete_states.get(tp)
            fp_cache = cache.fingerprint() if cache is not None and cache.segments else None
            fp_delete = None if delete is None else (int(delete.state), delete.event_timestamp_ms)
            if fp_cache is None and fp_delete is None:
                continue
            out.append((tp.topic_id, tp.partition, fp_cache, fp_delete))
        return out
