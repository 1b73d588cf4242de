"""The store's memory of finished deletes: small per entry, bounded, exact for redeliveries."""

from __future__ import annotations

import gc
import tracemalloc

import msgpack
import pytest

from rlmm.cache import RemotePartitionMetadataStore, metadata_store
from rlmm.codec import decode, encode
from rlmm.model import RemoteLogMetadata, RemoteLogSegmentMetadataUpdate
from tests.rlmm.factories import S, segment, tp, update


def deleted_segments(count: int, partitions: int = 3) -> list[bytes]:
    """The events of ``count`` segments copied then deleted, encoded as on the log."""
    out = []
    for i in range(count):
        m = segment(tp(i % partitions), i * 10, i * 10 + 9, {0: i * 10})
        out.append(encode(m))
        for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            out.append(encode(update(m, state)))
    return out


def apply_all(store: RemotePartitionMetadataStore, events: list[bytes]) -> None:
    """As the manager's apply loop: each event decoded from its record on its own."""
    for raw in events:
        event: RemoteLogMetadata = decode(raw)
        if not store.is_redelivery(event):
            store.apply(event, raw)


def test_a_deleted_segment_costs_little_memory_for_good() -> None:
    # A sidecar that deletes as much as it copies remembers up to 100k finished
    # deletes (for redelivered DELETE_SEGMENT_FINISHED records): each decoded id kept
    # whole (its uuid, its own TopicIdPartition) in an OrderedDict took ~520 bytes.
    count = 5000
    events = deleted_segments(count)
    store = RemotePartitionMetadataStore()
    apply_all(store, events[: 4 * 100])  # the partitions' caches exist before measuring
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        apply_all(store, events[4 * 100 :])
        gc.collect()
        per_segment = (tracemalloc.get_traced_memory()[0] - before) / (count - 100)
    finally:
        tracemalloc.stop()
    assert len(store._deleted) == count
    assert per_segment < 200, f"{per_segment:.0f} bytes kept per deleted segment"


def test_recent_deletes_forget_the_oldest_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_store, "_REMEMBERED_DELETES", 10)
    store = RemotePartitionMetadataStore()
    events = deleted_segments(25)
    apply_all(store, events)
    assert len(store._deleted) == 10
    finished = [decode(raw) for raw in events[3::4]]
    assert all(isinstance(e, RemoteLogSegmentMetadataUpdate) for e in finished)
    # the last 10 are recognised as redeliveries, the older ones no longer
    assert [store.is_redelivery(e) for e in finished] == [False] * 15 + [True] * 10


def test_recent_deletes_survive_a_snapshot_and_a_drop() -> None:
    store = RemotePartitionMetadataStore()
    events = deleted_segments(12)
    apply_all(store, events)
    finished = [decode(raw) for raw in events[3::4]]
    state = msgpack.unpackb(msgpack.packb(store.to_state(store.partitions())))
    fresh = RemotePartitionMetadataStore()
    fresh.load_state(state)
    assert all(fresh.is_redelivery(e) for e in finished)
    # the same uuid under another partition is not the same segment
    other = update(segment(tp(7), 0, 9, {0: 0}), S.DELETE_SEGMENT_FINISHED)
    moved = RemoteLogSegmentMetadataUpdate(
        type(other.remote_log_segment_id)(tp(7), finished[0].remote_log_segment_id.id),
        2, None, S.DELETE_SEGMENT_FINISHED, 0,
    )  # fmt: skip
    assert not fresh.is_redelivery(moved)
    fresh.drop(lambda t: t != tp(0))  # partition 0 forgotten, its deletes with it
    assert [fresh.is_redelivery(e) for e in finished] == [i % 3 != 0 for i in range(12)]
    assert len(fresh._deleted) == 8
