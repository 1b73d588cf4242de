"""rlmm.replay: the one replay of the remote log metadata (the manager's and the view's).

Records applied through it give the state the manager's and the view's own apply
bodies gave (the reference below is that body, kept here as the oracle); applied
offsets and redelivered copies are never applied twice; a snapshot plus the tail gives
the state of a full replay, in memory and through a real event log; a gap, a snapshot
ahead of the log and a corrupt snapshot block are handled as the manager handles them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from eventlog.memory import MemoryEventLog
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.codec import decode, encode
from rlmm.errors import CodecError, RemoteStorageError, ReplayGapError
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for
from rlmm.replay import MetadataReplay, ReplayStats
from snapshot import Snapshot, decode_snapshot, encode_snapshot
from tests.rlmm.factories import S, segment, tp, update

N = 3  # metadata partitions
Records = dict[int, list[tuple[int, bytes]]]  # metadata partition -> (offset, value)
UNDECODABLE = b"\x00\x07 not a RemoteLogMetadataSerde record"
TOPIC_IDS = (uuid.UUID(int=2), uuid.UUID(int=102))


def user(i: int) -> TopicIdPartition:
    """Six user partitions of two topics, spread over all N metadata partitions."""
    return tp(i % 3, topic=f"t{i // 3}", topic_id=TOPIC_IDS[i // 3])


def scenario() -> Records:
    """Every kind of record a replay meets, spread over the metadata partitions:
    adds, finishes, deletes, a partition delete, a redelivered add and a redelivered
    DELETE_SEGMENT_FINISHED, an undecodable record and two illegal events."""
    values: list[tuple[RemoteLogMetadata | None, bytes]] = []

    def put(event: RemoteLogMetadata) -> None:
        values.append((event, encode(event)))

    for partition in range(6):
        segments = [segment(user(partition), i * 100, i * 100 + 99, {0: 0}) for i in range(5)]
        for m in segments:
            put(m)
            put(update(m, S.COPY_SEGMENT_FINISHED))
        put(segments[0])  # a producer retry: the add again
        for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            put(update(segments[1], state))
        put(update(segments[1], S.DELETE_SEGMENT_FINISHED))  # redelivered
        put(update(segment(user(partition), 900, 999, {0: 0}), S.COPY_SEGMENT_FINISHED))  # unknown
        put(update(segments[2], S.DELETE_SEGMENT_FINISHED))  # never started: illegal
        if partition == 5:
            for ds in (
                RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
            ):
                put(RemotePartitionDeleteMetadata(user(partition), ds, 3, 0))
    records: Records = {p: [] for p in range(N)}
    for i, (event, value) in enumerate(values):
        assert event is not None
        p = metadata_partition_for(event.topic_id_partition, N)
        records[p].append((len(records[p]), value))
        if i == 7:  # one record nobody can decode
            records[p].append((len(records[p]), UNDECODABLE))
    assert all(records.values())
    return records


@dataclass
class Reference:
    store: RemotePartitionMetadataStore
    stats: ReplayStats


def reference_replay(records: Records) -> Reference:
    """The apply body the manager and the archive view each had before rlmm.replay."""
    store = RemotePartitionMetadataStore()
    stats = ReplayStats()
    for p in sorted(records):
        for _offset, value in records[p]:
            try:
                event = decode(value)
            except CodecError:
                stats.skipped_undecodable += 1
                continue
            if store.is_redelivery(event):
                stats.skipped_duplicates += 1
                continue
            try:
                store.apply(event)
            except RemoteStorageError:
                stats.skipped_invalid += 1
                continue
            stats.applied_events += 1
    return Reference(store, stats)


def batches(records: list[tuple[int, bytes]], size: int) -> Iterator[list[tuple[int, bytes]]]:
    for i in range(0, len(records), size):
        yield records[i : i + size]


def replay_all(
    records: Records, size: int = 4, replay: MetadataReplay | None = None
) -> MetadataReplay:
    replay = replay or MetadataReplay(N, ReplayStats())
    for p, partition_records in records.items():
        for batch in batches(partition_records, size):
            replay.apply_batch(p, batch)
    return replay


def counts(stats: ReplayStats) -> tuple[int, int, int, int]:
    return (
        stats.applied_events,
        stats.skipped_undecodable,
        stats.skipped_invalid,
        stats.skipped_duplicates,
    )


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_records_give_the_state_of_the_apply_body_they_replace(size: int) -> None:
    records = scenario()
    expected = reference_replay(records)
    replay = replay_all(records, size)
    assert replay.store.fingerprint() == expected.store.fingerprint()
    assert counts(replay.stats) == counts(expected.stats)
    # the scenario does meet every kind of record
    applied, undecodable, invalid, duplicates = counts(replay.stats)
    assert applied > 60 and undecodable == 1 and invalid == 12 and duplicates == 12
    assert replay.applied == {p: len(records[p]) - 1 for p in range(N)}
    assert replay.store.is_deleted(user(5))


def test_undecodable_and_illegal_records_are_handed_to_rejected() -> None:
    seen: list[tuple[int, int, str]] = []
    replay = MetadataReplay(
        N, ReplayStats(), rejected=lambda p, o, e, message: seen.append((p, o, message))
    )
    records = scenario()
    replay_all(records, replay=replay)
    assert len(seen) == replay.stats.skipped_undecodable + replay.stats.skipped_invalid
    assert all(m.startswith(f"metadata partition {p} offset {o}: skipped ") for p, o, m in seen)
    bad = next((p, o) for p in records for o, v in records[p] if v == UNDECODABLE)
    assert [(p, o) for p, o, m in seen if "skipped undecodable record" in m] == [bad]
    assert sum("skipped illegal event" in m for _, _, m in seen) == 12


def test_applied_offsets_and_redelivered_copies_are_not_applied_twice() -> None:
    records = scenario()
    once = replay_all(records)
    before = (once.store.fingerprint(), counts(once.stats), dict(once.applied))
    replay_all(records, size=2, replay=once)  # every offset again: at or below applied
    assert (once.store.fingerprint(), counts(once.stats), once.applied) == before
    # Copies at new offsets (a producer's retries): every add of a segment still there
    # and every DELETE_SEGMENT_FINISHED are recognised, counted and change nothing.
    for p, partition_records in records.items():
        copies = [v for _, v in partition_records if redelivered(once.store, v)]
        assert copies
        end = once.applied[p] + 1
        duplicates = once.stats.skipped_duplicates
        once.apply_batch(p, [(end + i, v) for i, v in enumerate(copies)])
        assert once.stats.skipped_duplicates == duplicates + len(copies)
        assert once.applied[p] == end + len(copies) - 1
    assert once.store.fingerprint() == before[0]
    assert counts(once.stats)[:3] == before[1][:3]


def redelivered(store: RemotePartitionMetadataStore, value: bytes) -> bool:
    """``value`` is a copy of an add of a segment the store holds, or of a finished delete."""
    if value == UNDECODABLE:
        return False
    event = decode(value)
    cache = store.caches.get(event.topic_id_partition)
    if cache is None:  # a deleted partition: its events are refused, not copies
        return False
    if isinstance(event, RemoteLogSegmentMetadata):
        return event.remote_log_segment_id in cache.segments
    return (
        isinstance(event, RemoteLogSegmentMetadataUpdate)
        and event.state == S.DELETE_SEGMENT_FINISHED
        and event.remote_log_segment_id not in cache.segments
    )


def snapshot_of(replay: MetadataReplay) -> Snapshot:
    """The replay's snapshot state, through the snapshot file format and back."""
    taken = replay.snapshot_state()
    assert taken is not None
    applied, state = taken
    snap = Snapshot(partition_count=N, applied_offsets=applied, state=state, created_ms=1)
    return decode_snapshot(encode_snapshot(snap))


@pytest.mark.parametrize("cut", [1, 9, 25, 10_000])
def test_a_snapshot_plus_the_tail_is_a_full_replay(cut: int) -> None:
    records = scenario()
    full = replay_all(records)
    head = replay_all({p: r[:cut] for p, r in records.items()})
    restarted = MetadataReplay(N, ReplayStats())
    assert restarted.restore(snapshot_of(head), source="a test snapshot")
    assert restarted.stats.restored_from_snapshot and restarted.store.cold_count > 0
    replay_all(records, size=5, replay=restarted)  # the tail: everything, duplicates too
    assert restarted.applied == full.applied
    assert restarted.store.fingerprint() == full.store.fingerprint()


def test_a_snapshot_of_nothing_applied_is_none_and_another_partitioning_is_refused() -> None:
    assert MetadataReplay(N, ReplayStats()).snapshot_state() is None
    snap = snapshot_of(replay_all(scenario()))
    other = MetadataReplay(N + 1, ReplayStats())
    assert not other.restore(snap)
    assert other.applied == {} and other.store.partitions() == set()
    assert not other.stats.restored_from_snapshot


async def written(records: Records) -> MemoryEventLog:
    log = MemoryEventLog(N)
    await log.start()
    for p, partition_records in records.items():
        for _offset, value in partition_records:
            await log.append(p, value)
    return log


def test_replay_to_a_real_log_from_a_snapshot_equals_a_full_replay() -> None:
    async def run() -> None:
        records = scenario()
        log = await written(records)
        ends = await log.end_offsets(range(N))
        full = MetadataReplay(N, ReplayStats())
        await full.replay_to(log, ends)
        assert full.store.fingerprint() == reference_replay(records).store.fingerprint()
        restarted = MetadataReplay(N, ReplayStats())
        restarted.restore(snapshot_of(replay_all({p: r[:10] for p, r in records.items()})))
        await log.append(0, encode(segment(tp(0), 5000, 5099, {0: 0})))  # after the ends
        await restarted.replay_to(log, ends)
        assert restarted.applied == full.applied == {p: ends[p] - 1 for p in range(N)}
        assert restarted.store.fingerprint() == full.store.fingerprint()
        await log.close()

    asyncio.run(run())


def test_replay_to_an_empty_partition_marks_it_empty() -> None:
    async def run() -> None:
        log = await written({0: [(0, encode(segment(tp(0), 0, 9, {0: 0})))], 1: [], 2: []})
        replay = MetadataReplay(N, ReplayStats())
        await replay.replay_to(log, await log.end_offsets(range(N)))
        assert replay.applied == {0: 0, 1: -1, 2: -1}
        await log.close()

    asyncio.run(run())


def test_a_snapshot_ahead_of_the_log_is_forgotten_and_the_log_replayed() -> None:
    async def run() -> None:
        records = scenario()
        ahead = replay_all(records)
        log = await written({p: r[:5] for p, r in records.items()})  # the log lost the rest
        replay = MetadataReplay(N, ReplayStats())
        replay.restore(snapshot_of(ahead))
        await replay.replay_to(log, await log.end_offsets(range(N)))
        assert replay.stats.full_replays == N
        expected = reference_replay({p: r[:5] for p, r in records.items()})
        assert replay.store.fingerprint() == expected.store.fingerprint()
        await log.close()

    asyncio.run(run())


class RetainedFrom(MemoryEventLog):
    """A log whose reads silently start at ``log_start`` (retention took the rest)."""

    def __init__(self, partitions: int, log_start: int) -> None:
        super().__init__(partitions)
        self.log_start = log_start

    async def read_batches(
        self, partition: int, start_offset: int = 0
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        async for batch in super().read_batches(partition, start_offset):
            kept = [r for r in batch if r[0] >= self.log_start]
            if kept:
                yield kept


def test_a_gap_before_the_tail_is_refused() -> None:
    async def run() -> None:
        log = RetainedFrom(1, log_start=3)
        await log.start()
        for i in range(6):
            await log.append(0, encode(segment(tp(0), i * 10, i * 10 + 9, {0: 0})))
        replay = MetadataReplay(1, ReplayStats())
        with pytest.raises(ReplayGapError, match=r"starts at offset 3 but the replay needs"):
            await replay.replay_to(log, await log.end_offsets([0]))
        await log.close()

    asyncio.run(run())


def test_a_corrupt_snapshot_block_met_in_the_tail_replays_the_partition_from_zero() -> None:
    """A cold partition is decoded once it has queued MAX_PENDING events; its block
    does not decode: its metadata partition is replayed from offset 0, the others
    keep their snapshot (as the manager's apply loop does)."""

    async def run() -> None:
        victim = tp(0)
        p = metadata_partition_for(victim, N)
        head = [segment(victim, i * 10, i * 10 + 9, {0: 0}) for i in range(3)]
        tail = [segment(victim, i * 10, i * 10 + 9, {0: 0}) for i in range(3, 1100)]
        log = MemoryEventLog(N)
        await log.start()
        for m in head + tail:
            await log.append(p, encode(m))
        before = MetadataReplay(N, ReplayStats())
        before.apply_batch(p, [(i, encode(m)) for i, m in enumerate(head)])
        snap = snapshot_of(before)
        assert len(snap.state) == 1  # the victim's block alone
        corrupt = [[*entry[:3], b"not a block", *entry[4:]] for entry in snap.state]
        replay = MetadataReplay(N, ReplayStats())
        replay.restore(Snapshot(N, snap.applied_offsets, corrupt, 1))
        await replay.replay_to(log, await log.end_offsets(range(N)))
        assert replay.stats.full_replays == 1
        assert len(replay.store.caches[victim].list_remote_log_segments()) == 1100
        assert replay.applied[p] == 1099
        await log.close()

    asyncio.run(run())
