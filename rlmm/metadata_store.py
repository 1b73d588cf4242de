"""Metadata of every user partition seen on the consumed metadata partitions.

Kafka's RemotePartitionMetadataStore: one RemoteLogMetadataCache per user partition
plus partition-delete states. Invariant: :meth:`check` and :meth:`apply` accept and
reject exactly the same events, and a rejected event changes nothing — so the write
path can validate before publishing and the apply loop can skip what replay rejects.
Once a partition's delete reaches DELETE_PARTITION_FINISHED its segments are gone and
only the delete record remains (reads then raise RemoteResourceNotFoundError).

Restore is lazy: a snapshot holds each user partition's cache as one encoded block,
and a restored partition stays *cold* (the block's bytes plus the segment events
applied to it since, in order) until something needs its cache: a read through
``caches``, a write-path check, a partition-delete event, or a snapshot once it has
pending events. Materialising decodes the block and applies the pending events in
order with the same accept/skip rules as the apply loop, so a cold partition always
means exactly what the hot one would (the state equals a replay of the log).
"""

from __future__ import annotations

import gc
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rlmm.cache import RemoteLogMetadataCache
from rlmm.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    SnapshotBlockError,
)
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


@dataclass(slots=True)
class _Cold:
    """A partition restored from a snapshot and not decoded yet."""

    block: bytes  # msgpack of RemoteLogMetadataCache.to_state()
    source: str  # the snapshot it came from (named in errors)
    pending: list[RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate] = field(
        default_factory=list
    )


class PartitionCaches(MutableMapping[TopicIdPartition, RemoteLogMetadataCache]):
    """TopicIdPartition -> cache; a cold partition is materialised on first access.

    Membership, ``len`` and iteration over keys never decode anything.
    """

    def __init__(self, store: RemotePartitionMetadataStore) -> None:
        self._store = store
        self.hot: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self.cold: dict[TopicIdPartition, _Cold] = {}

    def get(self, tp: TopicIdPartition, default: Any = None) -> Any:  # the read hot path
        cache = self.hot.get(tp)
        if cache is not None:
            return cache
        if tp in self.cold:
            return self._store._materialize(tp)
        return default

    def __getitem__(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.get(tp)
        if cache is None:
            raise KeyError(tp)
        return cache

    def __setitem__(self, tp: TopicIdPartition, cache: RemoteLogMetadataCache) -> None:
        self.cold.pop(tp, None)
        self.hot[tp] = cache

    def __delitem__(self, tp: TopicIdPartition) -> None:
        found = self.hot.pop(tp, None) is not None
        found = self.cold.pop(tp, None) is not None or found
        if not found:
            raise KeyError(tp)

    def discard(self, tp: TopicIdPartition) -> None:
        """Remove ``tp`` if present, without decoding a cold one."""
        self.hot.pop(tp, None)
        self.cold.pop(tp, None)

    def __contains__(self, tp: object) -> bool:
        return tp in self.hot or tp in self.cold

    def __iter__(self) -> Iterator[TopicIdPartition]:
        yield from list(self.hot)
        yield from list(self.cold)

    def __len__(self) -> int:
        return len(self.hot) + len(self.cold)


class RemotePartitionMetadataStore:
    """Caches of all user partitions known to one manager, keyed by TopicIdPartition."""

    def __init__(self) -> None:
        self.caches = PartitionCaches(self)
        self.delete_states: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        # Recently finished deletes, to recognise a redelivered DELETE_SEGMENT_FINISHED.
        self._deleted: OrderedDict[RemoteLogSegmentId, None] = OrderedDict()
        # Events skipped while materialising cold partitions (redelivered, illegal).
        self.deferred_skips = 0

    # ---- cold partitions ---------------------------------------------------------------

    def is_cold(self, tp: TopicIdPartition) -> bool:
        return tp in self.caches.cold

    @property
    def cold_count(self) -> int:
        return len(self.caches.cold)

    def _materialize(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        """Decode a cold partition's block and apply its pending events, in order."""
        cold = self.caches.cold[tp]
        # Thousands of new long-lived objects with no reference cycles: a cyclic GC
        # pass in the middle would only add latency to this first read, and later full
        # passes would walk them again and again, so they go out of its sight.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            cache = RemoteLogMetadataCache.from_state(
                tp, msgpack.unpackb(cold.block, raw=False, strict_map_key=False)
            )
        except Exception as e:  # any malformed block: the snapshot writer had a bug
            raise SnapshotBlockError(
                tp, f"the cache block of {tp} in snapshot {cold.source} cannot be decoded: {e!r}"
            ) from e
        finally:
            gc.freeze()
            if gc_was_enabled:
                gc.enable()
        del self.caches.cold[tp]
        self.caches.hot[tp] = cache
        for event in cold.pending:
            if not self.apply_or_skip(event):
                self.deferred_skips += 1
        return cache

    def apply_or_skip(self, event: RemoteLogMetadata) -> bool:
        """Apply ``event`` as the apply loop does; False if it was skipped (redelivered
        copy or illegal), which changes nothing."""
        if self.is_redelivery(event):
            return False
        try:
            self.apply(event)
        except RemoteStorageError:
            return False
        return True

    def is_redelivery(self, event: RemoteLogMetadata) -> bool:
        """True for a second copy of an event that already took effect.

        A non-idempotent producer retrying after a lost acknowledgement (Kafka, a
        broker restart) stores a record twice. The copy must not be reported as a
        failure to the writer whose write did take effect: an add of a segment that
        exists with the same immutable fields, or a DELETE_SEGMENT_FINISHED of a
        segment that was just deleted.
        """
        if self.is_cold(event.topic_id_partition):
            return False  # decided in order when the partition is materialised
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
            self.caches.get(tp)  # materialise: its pending events come first
            self.check(event)
            self.delete_states[tp] = event
            if event.state == _FINISHED:
                self.caches.discard(tp)
            return
        cold = self.caches.cold.get(tp)
        if cold is not None:
            # Applied in order when the partition is materialised. (A cold partition is
            # never deleted: a finished partition delete drops its cache.)
            cold.pending.append(event)
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
            self.caches.discard(tp)
            self.delete_states.pop(tp, None)

    # ---- snapshot state --------------------------------------------------------------------

    def to_state(self, tps: Iterable[TopicIdPartition]) -> list[Any]:
        """msgpack-ready copy of the given partitions: per partition its cache as one
        encoded block (a cold partition's block is reused as it is) and its delete state."""
        out: list[Any] = []
        for tp in tps:
            cold = self.caches.cold.get(tp)
            if cold is not None and not cold.pending:
                block: bytes | None = cold.block
            else:
                cache = self.caches.get(tp)
                block = None if cache is None else msgpack.packb(cache.to_state())
            delete = self.delete_states.get(tp)
            out.append(
                [
                    tp.topic_id.bytes,
                    tp.topic,
                    tp.partition,
                    block,
                    None
                    if delete is None
                    else [int(delete.state), delete.event_timestamp_ms, delete.broker_id],
                ]
            )
        return out

    def load_state(self, state: Iterable[Any], source: str = "a snapshot") -> None:
        """Add the partitions of a :meth:`to_state` copy (replacing what is there).

        Blocks stay cold until first needed; ``source`` names the snapshot in errors.
        A state written before blocks existed (the cache state inline) loads eagerly.
        """
        for topic_id, topic, partition, cache_state, delete in state:
            tp = TopicIdPartition(uuid.UUID(bytes=topic_id), topic, partition)
            self.caches.discard(tp)
            self.delete_states.pop(tp, None)
            if isinstance(cache_state, bytes):
                self.caches.cold[tp] = _Cold(cache_state, source)
            elif cache_state is not None:
                self.caches.hot[tp] = RemoteLogMetadataCache.from_state(tp, cache_state)
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
