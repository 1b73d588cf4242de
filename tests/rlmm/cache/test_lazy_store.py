"""Lazy restore in the store: blocks decode to the same state, queued events stay exact."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from rlmm import _fast_paths
from rlmm.cache import (
    BlockError,
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
    metadata_store,
)
from rlmm.cache import _block as _cache_block
from rlmm.errors import RemoteStorageError, SnapshotBlockError
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tests.rlmm.factories import S, segment, tp, update

TPS = [tp(i) for i in range(6)]


def traffic(seed: int, count: int, *, illegal: bool = True) -> Iterator[RemoteLogMetadata]:
    """Random RLMM events over TPS, legal ones mostly, plus (optionally) illegal ones,
    producer-retry duplicates and partition deletes."""
    rng = random.Random(seed)
    live: list[RemoteLogSegmentMetadata] = []
    state: dict[object, S] = {}
    next_offset = dict.fromkeys(TPS, 0)
    deletes: dict[TopicIdPartition, int] = {}
    delete_steps = list(RemotePartitionDeleteState)
    for _ in range(count):
        r = rng.random()
        if r < 0.4 or not live:
            t = rng.choice(TPS)
            start = next_offset[t]
            next_offset[t] = end = start + rng.randrange(1, 60)
            epochs = {start // 150: start}
            if rng.random() < 0.3 and end - 1 > start + 1:
                epochs[start // 150 + 1] = start + 1
            m = segment(t, start, end - 1, epochs, size=rng.randrange(1, 999))
            live.append(m)
            state[m.remote_log_segment_id] = S.COPY_SEGMENT_STARTED
            yield m
        elif r < 0.88:
            m = rng.choice(live)
            current = state[m.remote_log_segment_id]
            legal = {
                S.COPY_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
                S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
                S.DELETE_SEGMENT_STARTED: [S.DELETE_SEGMENT_FINISHED],
                S.DELETE_SEGMENT_FINISHED: [S.DELETE_SEGMENT_FINISHED],
            }[current]
            nxt = rng.choice(legal if not illegal or rng.random() < 0.85 else list(S)[1:])
            if current != S.DELETE_SEGMENT_FINISHED or nxt == S.DELETE_SEGMENT_FINISHED:
                state[m.remote_log_segment_id] = nxt if nxt in legal else current
            yield update(m, nxt, custom=bytes([rng.randrange(256)]))
        elif r < 0.95 and illegal:
            yield rng.choice(live)  # a producer retry of an add (or a stale one)
        elif r < 0.97:
            t = rng.choice(TPS)
            step = deletes.get(t, -1) + (1 if rng.random() < 0.8 else 2)
            if step < len(delete_steps):
                deletes[t] = step
                yield RemotePartitionDeleteMetadata(t, delete_steps[step], rng.randrange(99), 0)


def replay(store: RemotePartitionMetadataStore, events: list[RemoteLogMetadata]) -> None:
    """What the manager's apply loop does with each event."""
    for event in events:
        if store.is_redelivery(event):
            continue
        with contextlib.suppress(RemoteStorageError):
            store.apply(event)


def restored(store: RemotePartitionMetadataStore) -> RemotePartitionMetadataStore:
    """A fresh store loaded from ``store``'s snapshot state, round-tripped through msgpack."""
    state = msgpack.unpackb(msgpack.packb(store.to_state(store.partitions())))
    fresh = RemotePartitionMetadataStore()
    fresh.load_state(state, source="test snapshot")
    return fresh


def test_fast_block_builders_loaded() -> None:
    assert _cache_block.FAST_BLOCKS is _fast_paths.ALLOWED  # RLMM_NO_FAST_PATHS: the slow ones


@pytest.mark.parametrize("seed", range(4))
def test_block_round_trip_is_exact(seed: int) -> None:
    store = RemotePartitionMetadataStore()
    replay(store, list(traffic(seed, 600)))
    for t, cache in store.caches.items():
        copy = RemoteLogMetadataCache.from_block(t, cache.to_block())
        assert copy.fingerprint() == cache.fingerprint()
        for epoch in range(8):
            for offset in range(0, 3000, 11):
                assert copy.remote_log_segment_metadata(epoch, offset) == (
                    cache.remote_log_segment_metadata(epoch, offset)
                )
            assert copy.list_remote_log_segments(epoch) == cache.list_remote_log_segments(epoch)
            assert copy.next_segment_with_txn_index(epoch, 0) == (
                cache.next_segment_with_txn_index(epoch, 0)
            )


def test_block_is_reused_until_the_cache_changes() -> None:
    store = RemotePartitionMetadataStore()
    events = [e for e in traffic(7, 200, illegal=False) if e.topic_id_partition == TPS[0]]
    replay(store, events)
    cache = store.caches[TPS[0]]
    block = cache.to_block()
    assert cache.to_block() is block
    m = segment(TPS[0], 10**6, 10**6 + 5, {9: 10**6})
    cache.add_copy_in_progress_segment(m)
    assert cache.to_block() is not block
    decoded = RemoteLogMetadataCache.from_block(TPS[0], cache.to_block())
    assert decoded.fingerprint() == cache.fingerprint()


@pytest.mark.parametrize("seed", range(12))
def test_queued_events_on_cold_partitions_equal_a_full_replay(seed: int) -> None:
    rng = random.Random(seed)
    events = list(traffic(seed, 500))
    cut = rng.randrange(len(events))
    full = RemotePartitionMetadataStore()
    replay(full, events)
    head = RemotePartitionMetadataStore()
    replay(head, events[:cut])
    lazy = restored(head)
    assert lazy.cold_partitions() == {t for t in head.caches}
    replay(lazy, events[cut:])  # illegal ones and retries included: queued, judged later
    assert lazy.partitions() == full.partitions()
    assert lazy.fingerprint() == full.fingerprint()
    assert not lazy.cold_partitions()


@pytest.mark.parametrize("seed", range(6))
def test_snapshot_of_cold_partitions_keeps_their_blocks_and_queues(seed: int) -> None:
    events = list(traffic(100 + seed, 600))
    a, b = len(events) // 3, 2 * len(events) // 3
    full = RemotePartitionMetadataStore()
    replay(full, events)
    first = RemotePartitionMetadataStore()
    replay(first, events[:a])
    second = restored(first)
    replay(second, events[a:b])
    cold = second.cold_partitions()
    state = second.to_state(second.partitions())
    assert second.cold_partitions() == cold  # taking the snapshot decoded nothing
    blocks = {entry[2]: entry[3] for entry in state}
    for t in cold:
        assert blocks[t.partition] is second._cold[t].block  # the same bytes, not a copy
    third = RemotePartitionMetadataStore()
    third.load_state(msgpack.unpackb(msgpack.packb(state)))
    replay(third, events[b:])
    assert third.fingerprint() == full.fingerprint()


def test_a_long_queue_decodes_the_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_store, "MAX_PENDING", 3)
    events = [e for e in traffic(3, 400, illegal=False) if e.topic_id_partition == TPS[1]]
    head = RemotePartitionMetadataStore()
    replay(head, events[:50])
    lazy = restored(head)
    replay(lazy, events[50:53])
    assert lazy.is_cold(TPS[1]) and len(lazy._cold[TPS[1]].pending) == 3
    replay(lazy, events[53:54])
    assert not lazy.is_cold(TPS[1])
    replay(lazy, events[54:])
    full = RemotePartitionMetadataStore()
    replay(full, events)
    assert lazy.fingerprint() == full.fingerprint()


def test_mapping_view_decodes_on_read_only() -> None:
    head = RemotePartitionMetadataStore()
    replay(head, list(traffic(5, 300, illegal=False)))
    lazy = restored(head)
    cold = lazy.cold_partitions()
    assert cold and set(lazy.caches) == set(head.caches) and len(lazy.caches) == len(cold)
    first = next(iter(cold))
    assert first in lazy.caches and lazy.is_cold(first)
    assert lazy.caches[first].fingerprint() == head.caches[first].fingerprint()
    assert not lazy.is_cold(first) and lazy.cold_partitions() == cold - {first}
    lazy.drop(lambda t: t == first)  # dropping decodes nothing
    assert set(lazy.caches) == {first}
    assert lazy.caches.get(tp(99)) is None


def test_format_1_state_still_loads() -> None:
    head = RemotePartitionMetadataStore()
    replay(head, list(traffic(9, 300)))
    v1 = [
        [
            t.topic_id.bytes,
            t.topic,
            t.partition,
            head.caches[t].to_state() if t in head.caches else None,
            None if (d := head.delete_states.get(t)) is None else [int(d.state), 5, 0],
        ]
        for t in head.partitions()
    ]
    store = RemotePartitionMetadataStore()
    store.load_state(msgpack.unpackb(msgpack.packb(v1)))
    assert not store.cold_partitions()
    assert [x[:3] for x in store.fingerprint()] == [x[:3] for x in head.fingerprint()]


def as_lists(value: object) -> object:
    """``value`` with every tuple a list: how the states were built before they were typed."""
    if isinstance(value, (list, tuple)):
        return [as_lists(v) for v in value]
    return value


def test_typed_states_pack_to_the_bytes_of_lists() -> None:
    # States are tuples now; msgpack packs a tuple as a list, so files keep their bytes.
    head = RemotePartitionMetadataStore()
    replay(head, list(traffic(11, 300)))
    state = head.to_state(head.partitions())
    assert any(entry[4] is not None for entry in state)  # a delete is in it too
    assert msgpack.packb(state) == msgpack.packb(as_lists(state))
    v1 = [c.to_state() for c in head.caches.values()]
    assert msgpack.packb(v1) == msgpack.packb(as_lists(v1))


@pytest.mark.parametrize(
    "state",
    [
        {"i": 1},
        [[b"\0" * 16, "t", 0, None]],  # four fields
        [["not bytes", "t", 0, None, None]],
        [[b"\0" * 16, "t", "0", None, None]],
        [[b"\0" * 16, "t", 0, None, [1, 2]]],  # a delete of two fields
        [[b"\0" * 16, "t", 0, b"block", None, ["not bytes"]]],
        [[b"\0" * 16, "t", 0, None, None, [], [7]]],
        [[b"\0" * 16, "t", 0, [[[b"\0" * 16, "0"]], []], None]],  # a format-1 segment
        [[b"\0" * 16, "t", 0, [[], [[0, [[0]], [], None]]], None]],  # a format-1 index
    ],
    ids=[
        "a map",
        "short",
        "topic id",
        "partition",
        "delete",
        "queue",
        "deleted ids",
        "format-1 segment",
        "format-1 index",
    ],
)
def test_a_state_of_another_shape_is_refused_naming_the_snapshot(state: object) -> None:
    with pytest.raises(ValueError, match="snapshot X"):
        RemotePartitionMetadataStore().load_state(
            msgpack.unpackb(msgpack.packb(state)), "snapshot X"
        )


def join_block(header: list[Any], columns: bytes) -> bytes:
    """A version-4 block of ``header`` (changed or not) and the columns that
    ``split_block`` returned: the inverse of ``split_block``."""
    head = msgpack.packb(header, use_bin_type=True)
    prefix = _cache_block._PREFIX
    end = prefix.size + len(head)
    return prefix.pack(_cache_block.MAGIC, len(head)) + head + bytes(-end % 8) + columns


def corrupted(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "garbage":
        return b"\xc1" + data[1:]
    header, columns = _cache_block.split_block(data)
    if how == "other partition":
        header[1] += 1
    elif how == "bad index":
        header[8][0][4] = [header[2] + 5]  # an unreferenced row past the last segment
    elif how == "bad total":
        header[5] += 1
    elif how == "custom past the last":
        header[7] = [[header[2], b"manifest"]]
    elif how == "custom row huge":
        header[7] = [[1 << 40, b"manifest"]]  # refused before anything is sized by it
    elif how == "custom not bytes":
        header[7] = [[0, "manifest"]]
    return join_block(header, columns)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "garbage",
        "other partition",
        "bad index",
        "bad total",
        "custom past the last",
        "custom row huge",
        "custom not bytes",
    ],
)
def test_corrupt_block_names_partition_and_snapshot(how: str) -> None:
    head = RemotePartitionMetadataStore()
    events = list(traffic(11, 300, illegal=False))
    replay(head, events)
    lazy = restored(head)
    victim = next(t for t in TPS if t in head.caches and head.caches[t].epochs)
    lazy._cold[victim].block = corrupted(lazy._cold[victim].block, how)
    with pytest.raises(SnapshotBlockError) as info:
        lazy.caches.get(victim)
    assert str(victim) in str(info.value) and "test snapshot" in str(info.value)
    assert info.value.partition == victim and info.value.retriable
    # never silently wrong: the partition stays undecodable, it does not turn empty
    assert lazy.is_cold(victim)
    with pytest.raises(SnapshotBlockError):
        lazy.check(
            update(
                next(
                    e
                    for e in events
                    if isinstance(e, RemoteLogSegmentMetadata) and e.topic_id_partition == victim
                ),
                S.COPY_SEGMENT_FINISHED,
            )
        )
    with pytest.raises(BlockError):
        RemoteLogMetadataCache.from_block(victim, lazy._cold[victim].block)


def test_dropped_partition_replays_its_deletes_again() -> None:
    events = list(traffic(21, 400, illegal=False))
    store = RemotePartitionMetadataStore()
    replay(store, events)
    assert any(e.state == S.DELETE_SEGMENT_FINISHED for e in events if hasattr(e, "state"))
    store.drop(lambda t: False)
    replay(store, events)
    full = RemotePartitionMetadataStore()
    replay(full, events)
    assert store.fingerprint() == full.fingerprint()


def test_first_reads_from_several_threads_decode_once() -> None:
    head = RemotePartitionMetadataStore()
    replay(head, list(traffic(13, 600, illegal=False)))
    lazy = restored(head)
    victims = sorted(lazy.cold_partitions(), key=lambda t: t.partition)
    seen: list[list[object]] = []

    def read_all() -> None:
        seen.append([lazy.caches.get(t) for t in victims])

    threads = [threading.Thread(target=read_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4 and all(row == seen[0] for row in seen)
    assert all(a is b for row in seen for a, b in zip(row, seen[0], strict=True))
    assert lazy.fingerprint() == head.fingerprint()
