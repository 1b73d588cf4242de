"""Metadata of every user partition seen on the consumed metadata partitions.

Kafka's RemotePartitionMetadataStore: one RemoteLogMetadataCache per user partition
plus partition-delete states. Invariant: :meth:`check` and :meth:`apply` accept and
reject exactly the same events, and a rejected event changes nothing — so the write
path can validate before publishing and the apply loop can skip what replay rejects.
Once a partition's delete reaches DELETE_PARTITION_FINISHED its segments are gone and
only the delete record remains (reads then raise RemoteResourceNotFoundError).

Lazy restore: a snapshot (format 2) holds each partition's cache as an encoded block;
:meth:`load_state` only indexes the blocks ("cold" partitions). A cold partition is
decoded on its first read (``caches[tp]``/``caches.get``), first :meth:`check`, or once
it has queued ``MAX_PENDING`` events; until then :meth:`apply` checks what needs no
cache (partition deletes) and queues the rest, and decoding replays the queue in order
through the same checks, skipping what the apply loop would have skipped. So the state
a cold partition stands for is exactly block + queue, and every read sees it decoded.
:meth:`to_state` copies a cold block (and its queue) into the next snapshot as is.
"""

from __future__ import annotations

import gc
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from collections.abc import Set as AbstractSet
from typing import TypeAlias, TypeVar, overload

from rlmm.cache._block import BlockError, is_bytes_list, is_fields
from rlmm.cache.partition import CacheFields, RemoteLogMetadataCache, cache_fields
from rlmm.codec import decode, encode
from rlmm.errors import (
    CodecError,
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

log = logging.getLogger(__name__)
D = TypeVar("D")  # what PartitionCaches.get gives for a partition it lacks

_FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
_REMEMBERED_DELETES = 100_000
# Events queued on a cold partition before it is decoded anyway: bounds the queue's
# memory and the extra work of its first read.
MAX_PENDING = 1024


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


class _RecentDeletes:
    """The segments whose DELETE_SEGMENT_FINISHED applied last, at most ``limit``,
    the oldest forgotten first.

    A long-running sidecar that deletes as much as it copies fills it for good, so an
    entry is kept small: the id's 128-bit int (its uuid's own), a slot in a dict and
    one in a deque, and a reference to a TopicIdPartition the caller shares (the
    partition's cache's): about 100 bytes, where the id object decoded from the event,
    with its own uuid and TopicIdPartition, in an OrderedDict took about 520 (52 MiB
    at the limit).
    """

    __slots__ = ("_order", "_tps", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tps: dict[int, TopicIdPartition] = {}  # segment uuid as int -> partition
        self._order: deque[int] = deque()  # the same ints, oldest first

    def add(self, tp: TopicIdPartition, segment_uuid: uuid.UUID) -> None:
        key = segment_uuid.int
        if key not in self._tps:
            self._order.append(key)
        self._tps[key] = tp
        while len(self._order) > self.limit:
            del self._tps[self._order.popleft()]

    def __contains__(self, sid: object) -> bool:
        if not isinstance(sid, RemoteLogSegmentId):
            return False
        found = self._tps.get(sid.id.int)
        return found is not None and found == sid.topic_id_partition

    def __len__(self) -> int:
        return len(self._order)

    def by_partition(self) -> dict[TopicIdPartition, list[bytes]]:
        """Each partition's remembered ids, as uuid bytes, oldest first."""
        out: dict[TopicIdPartition, list[bytes]] = {}
        for key in self._order:
            out.setdefault(self._tps[key], []).append(key.to_bytes(16, "big"))
        return out

    def forget(self, gone: AbstractSet[TopicIdPartition]) -> None:
        """Drop the entries of the partitions ``gone``."""
        if not any(tp in gone for tp in self._tps.values()):
            return
        self._tps = {k: tp for k, tp in self._tps.items() if tp not in gone}
        self._order = deque(k for k in self._order if k in self._tps)


# A partition's delete in a snapshot: its state, event timestamp and broker.
DeleteFields: TypeAlias = tuple[int, int, int]
# One partition in a snapshot (format 2): topic id bytes, topic, partition, its cache's
# block (None: no cache), its delete (None: none), its queued events' encodings, its
# recently deleted segment ids' bytes. Written as tuples; msgpack reads them back as
# lists (load_state takes either). Format 1 had the first five fields only, the cache
# as its CacheFields instead of a block (read with the last two empty).
PartitionFields: TypeAlias = tuple[
    bytes, str, int, bytes | CacheFields | None, DeleteFields | None, list[bytes], list[bytes]
]
StoreState: TypeAlias = list[PartitionFields]


class _Cold:
    """A partition restored from a snapshot but not decoded yet: block + queued events."""

    __slots__ = ("block", "pending", "source")

    def __init__(self, block: bytes, pending: list[RemoteLogMetadata | bytes], source: str) -> None:
        self.block = block
        self.pending = pending  # events (or their encoding, from a snapshot), in order
        self.source = source


class PartitionCaches(MutableMapping[TopicIdPartition, RemoteLogMetadataCache]):
    """``store.caches``: a mapping whose cold entries are decoded when they are read.

    Membership, iteration and ``len`` do not decode anything; ``[tp]``, ``get``,
    ``values()`` and ``items()`` do (SnapshotBlockError if a block is corrupt).
    """

    __slots__ = ("_store", "cold", "hot")

    def __init__(self, store: RemotePartitionMetadataStore) -> None:
        self._store = store
        self.hot: dict[TopicIdPartition, RemoteLogMetadataCache] = {}  # decoded
        self.cold: dict[TopicIdPartition, _Cold] = {}  # restored, not decoded yet

    def __getitem__(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.hot.get(tp)
        if cache is not None:
            return cache
        if tp in self.cold:
            return self._store._materialize(tp)
        raise KeyError(tp)

    @overload
    def get(self, tp: TopicIdPartition, /) -> RemoteLogMetadataCache | None: ...
    @overload
    def get(
        self, tp: TopicIdPartition, default: RemoteLogMetadataCache | D, /
    ) -> RemoteLogMetadataCache | D: ...
    def get(self, tp: TopicIdPartition, default: object = None) -> object:
        # The hot path of every read: one dict lookup when the partition is decoded.
        cache = self.hot.get(tp)
        if cache is not None:
            return cache
        if tp in self.cold:
            return self._store._materialize(tp)
        return default

    def __contains__(self, tp: object) -> bool:
        return tp in self.hot or tp in self.cold

    def __iter__(self) -> Iterator[TopicIdPartition]:
        yield from list(self.hot)
        yield from list(self.cold)

    def __len__(self) -> int:
        return len(self.hot) + len(self.cold)

    def __setitem__(self, tp: TopicIdPartition, cache: RemoteLogMetadataCache) -> None:
        self.cold.pop(tp, None)
        self.hot[tp] = cache

    def __delitem__(self, tp: TopicIdPartition) -> None:
        if self.hot.pop(tp, None) is None and self.cold.pop(tp, None) is None:
            raise KeyError(tp)

    def discard(self, tp: TopicIdPartition) -> None:
        """Forget ``tp`` without decoding it."""
        self.hot.pop(tp, None)
        self.cold.pop(tp, None)


class RemotePartitionMetadataStore:
    """Caches of all user partitions known to one manager, keyed by TopicIdPartition."""

    def __init__(self) -> None:
        self.caches = PartitionCaches(self)
        self._live = self.caches.hot
        self._cold = self.caches.cold
        self.delete_states: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        # Recently finished deletes, to recognise a redelivered DELETE_SEGMENT_FINISHED.
        self._deleted = _RecentDeletes(_REMEMBERED_DELETES)
        # Queued events skipped when their cold partition was decoded (redelivered
        # copies, illegal events): what the apply loop would have skipped on arrival.
        self.deferred_skips = 0
        # Readers of a loaded store (a shared read-only view) may decode from several
        # threads: one decodes a partition, the others then find it decoded.
        self._decode_lock = threading.Lock()

    def is_redelivery(self, event: RemoteLogMetadata) -> bool:
        """True for a second copy of an event that already took effect.

        A non-idempotent producer retrying after a lost acknowledgement (Kafka, a
        broker restart) stores a record twice. The copy must not be reported as a
        failure to the writer whose write did take effect: an add of a segment that
        exists with the same immutable fields, or a DELETE_SEGMENT_FINISHED of a
        segment that was just deleted. (A copy queued on a cold partition is
        recognised when the partition is decoded.)
        """
        if isinstance(event, RemoteLogSegmentMetadata):
            cache = self._live.get(event.topic_id_partition)
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
        """Raise what :meth:`apply` would raise for ``event``; change nothing.

        Decodes a cold partition first (SnapshotBlockError if its block is corrupt).
        """
        tp = event.topic_id_partition
        if isinstance(event, RemotePartitionDeleteMetadata):
            current = self.delete_states.get(tp)
            check_partition_delete_transition(current.state if current else None, event.state, tp)
            return
        self._check_not_deleted(tp, event)
        cache = self.caches.get(tp)
        if isinstance(event, RemoteLogSegmentMetadata):
            (cache or RemoteLogMetadataCache(tp)).check_add(event)
        else:
            self._existing(cache, event).check_update(event)

    def apply(self, event: RemoteLogMetadata, encoded: bytes | None = None) -> None:
        """Apply one event; an illegal one raises and leaves the store unchanged.

        On a cold partition the event is queued (and checked when it is decoded); as
        ``encoded`` (its record value, which decodes to ``event``) when given. A queued
        encoding is ~100 untracked bytes where the event is ~10 objects the cyclic GC
        walks until the partition is decoded: the 1% tail at 10M segments queues 200k
        events, and its collections cost ~4 us an event (measured).
        """
        tp = event.topic_id_partition
        if isinstance(event, RemotePartitionDeleteMetadata):
            self.check(event)
            self.delete_states[tp] = event
            if event.state == _FINISHED:
                self.caches.discard(tp)
            return
        self._check_not_deleted(tp, event)
        cold = self._cold.get(tp)
        if cold is not None:
            if len(cold.pending) < MAX_PENDING:
                cold.pending.append(event if encoded is None else encoded)
                return
            self._materialize(tp)
        self._apply_live(tp, event)

    def _apply_live(self, tp: TopicIdPartition, event: RemoteLogMetadata) -> None:
        if isinstance(event, RemoteLogSegmentMetadata):
            cache = self._live.get(tp)
            if cache is None:
                cache = RemoteLogMetadataCache(tp)
                cache.check_add(event)
                self._live[tp] = cache
            cache.add_copy_in_progress_segment(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            cache = self._existing(self._live.get(tp), event)
            cache.update_remote_log_segment_metadata(event)
            if event.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                # the cache's partition object, not the event's: one shared by all
                self._deleted.add(cache.topic_id_partition, event.remote_log_segment_id.id)

    @staticmethod
    def _existing(
        cache: RemoteLogMetadataCache | None, event: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogMetadataCache:
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

    # ---- lazy restore ------------------------------------------------------------------

    def _materialize(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        """Decode cold ``tp`` and apply its queued events in order; all or nothing."""
        with self._decode_lock:
            cache = self._live.get(tp)
            if cache is not None:
                return cache  # decoded by another thread meanwhile
            return self._decode(tp, self._cold[tp])

    def _decode(self, tp: TopicIdPartition, cold: _Cold) -> RemoteLogMetadataCache:
        # Decoding makes thousands of long-lived objects at once: no collection may
        # run midway, and afterwards they are moved out of the collector's sight (as
        # start() did for a whole snapshot before restores were lazy), or collections
        # of ever older generations would walk every partition decoded so far.
        # They hold no reference cycles, so refcounting still frees them.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            try:
                cache = RemoteLogMetadataCache.from_block(tp, cold.block)
                pending = [decode(e) if isinstance(e, bytes) else e for e in cold.pending]
            except (BlockError, CodecError) as exc:
                raise SnapshotBlockError(tp, cold.source, str(exc)) from exc
            del self._cold[tp]
            self._live[tp] = cache
            for event in pending:
                if self.is_redelivery(event):
                    self.deferred_skips += 1
                    continue
                try:
                    self._apply_live(tp, event)
                except RemoteStorageError as exc:
                    # The apply loop skips an illegal event; so does its delayed apply.
                    self.deferred_skips += 1
                    log.warning("%s: skipped illegal queued event: %s", tp, exc)
        finally:
            gc.freeze()
            if was_enabled:
                gc.enable()
        return cache

    def is_cold(self, tp: TopicIdPartition) -> bool:
        return tp in self._cold

    @property
    def cold_count(self) -> int:
        return len(self._cold)

    def cold_partitions(self) -> set[TopicIdPartition]:
        """Partitions restored from a snapshot and not decoded yet."""
        return set(self._cold)

    # ---- read side ---------------------------------------------------------------------

    def is_deleted(self, tp: TopicIdPartition) -> bool:
        delete = self.delete_states.get(tp)
        return delete is not None and delete.state == _FINISHED

    def partitions(self) -> set[TopicIdPartition]:
        return set(self._live) | set(self._cold) | set(self.delete_states)

    def drop(self, keep: Callable[[TopicIdPartition], bool]) -> None:
        """Forget every partition for which ``keep`` is false (without decoding it).

        Their remembered deletes go too: a replay of their events must not take a
        DELETE_SEGMENT_FINISHED for a redelivery of the one it replaces.
        """
        gone = {tp for tp in self.partitions() if not keep(tp)}
        for tp in gone:
            self.caches.discard(tp)
            self.delete_states.pop(tp, None)
        self._deleted.forget(gone)

    # ---- snapshot state --------------------------------------------------------------------

    def to_state(self, tps: Iterable[TopicIdPartition]) -> StoreState:
        """msgpack-ready copy of the given partitions (snapshot format 2).

        Per partition ``[topic_id, topic, partition, block, delete, queued events,
        recently deleted segment ids]``: a cold partition's block is copied as the same
        bytes, with its queue encoded; a decoded one's block is re-encoded only if it
        changed since the last time. The deleted ids keep redelivery detection (and so
        the state after a retried DELETE_SEGMENT_FINISHED) the same as a full replay's.
        """
        deleted = self._deleted.by_partition()
        out: StoreState = []
        for tp in tps:
            cache = self._live.get(tp)
            cold = self._cold.get(tp)
            delete = self.delete_states.get(tp)
            if cold is not None:
                block: bytes | None = cold.block
                pending = [e if isinstance(e, bytes) else encode(e) for e in cold.pending]
            else:
                block = cache.to_block() if cache is not None else None
                pending = []
            out.append(
                (
                    tp.topic_id.bytes,
                    tp.topic,
                    tp.partition,
                    block,
                    None
                    if delete is None
                    else (int(delete.state), delete.event_timestamp_ms, delete.broker_id),
                    pending,
                    deleted.get(tp, []),
                )
            )
        return out

    def load_state(self, state: object, source: str = "a snapshot") -> None:
        """Add the partitions of a :meth:`to_state` copy, or of the lists msgpack reads
        back for one (replacing what is there); ValueError if it has another shape.

        Format-2 blocks stay encoded until first use; a format-1 state (nested lists,
        five fields per partition) is decoded at once. ``source`` names the snapshot
        in the error a corrupt block raises.
        """
        if not is_fields(state):
            raise ValueError(f"{source}: the state is a {type(state).__name__}, not a list")
        for entry in state:
            topic_id, topic, partition, cache_state, delete, pending, deleted = _partition(
                entry, source
            )
            tp = TopicIdPartition(uuid.UUID(bytes=topic_id), topic, partition)
            self.caches.discard(tp)
            self.delete_states.pop(tp, None)
            for raw in deleted:
                self._deleted.add(tp, uuid.UUID(bytes=raw))
            if isinstance(cache_state, bytes):
                queued: list[RemoteLogMetadata | bytes] = list(pending)
                self._cold[tp] = _Cold(cache_state, queued, source)
            elif cache_state is not None:
                self._live[tp] = RemoteLogMetadataCache.from_state(tp, cache_state)
            if delete is not None:
                self.delete_states[tp] = RemotePartitionDeleteMetadata(
                    tp, RemotePartitionDeleteState(delete[0]), delete[1], delete[2]
                )

    def fingerprint(self, tps: Iterable[TopicIdPartition] | None = None) -> object:
        """Order-independent view of the state, for comparisons (tests, verification).

        Decodes every cold partition it covers.
        """
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


def _partition(entry: object, source: str) -> PartitionFields:
    """The fields of one partition of a snapshot state (format 2, or 1); ValueError
    naming ``source`` if it has another shape."""
    if not is_fields(entry) or not 5 <= len(entry) <= 7:
        raise ValueError(f"{source}: a partition's state is not 5 to 7 fields")
    topic_id, topic, partition, cache_state, delete = entry[:5]
    pending = entry[5] if len(entry) > 5 else []
    deleted = entry[6] if len(entry) > 6 else []
    if not (
        isinstance(topic_id, bytes)
        and isinstance(topic, str)
        and type(partition) is int
        and is_bytes_list(pending)
        and is_bytes_list(deleted)
    ):
        raise ValueError(f"{source}: a partition's state has fields of the wrong types")
    fields = None if delete is None else _delete_fields(delete)
    if fields is None and delete is not None:
        raise ValueError(f"{source}: partition {partition}'s delete is not 3 integers")
    if cache_state is None or isinstance(cache_state, bytes):
        return topic_id, topic, partition, cache_state, fields, pending, deleted
    try:
        cache = cache_fields(cache_state)
    except ValueError as exc:
        raise ValueError(f"{source}: partition {partition}: {exc}") from exc
    return topic_id, topic, partition, cache, fields, pending, deleted


def _delete_fields(delete: object) -> DeleteFields | None:
    """``[state, event timestamp, broker]`` as its fields; None if it is not that."""
    if not is_fields(delete) or len(delete) != 3:
        return None
    state, timestamp, broker = delete
    if type(state) is int and type(timestamp) is int and type(broker) is int:
        return state, timestamp, broker
    return None
