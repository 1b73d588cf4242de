"""The columnar cache's own mechanics: dead rows and compaction, a cache reading its
block in place and then changing, version-2 and version-3 blocks from before the
records, segments with more epochs than a record counts, and the object memo. Every
check compares with what the public reads answered before."""

from __future__ import annotations

import dataclasses
import random
import struct
from array import array
from typing import Any

import msgpack
import pytest

from rlmm.cache import BlockError, RemoteLogMetadataCache
from rlmm.cache import _columns as columns_module
from rlmm.cache import partition as cache_module
from rlmm.cache._block import segment_to_state, split_block
from rlmm.cache._columns import RECORD
from rlmm.model import (
    RemoteLogSegmentMetadata,
    is_rlmm_segment_id,
    is_rlmm_segment_uuid,
    new_rlmm_segment_id,
)
from tests.rlmm.factories import S, segment, tp, update

TP = tp(3)


def reads(cache: RemoteLogMetadataCache) -> Any:
    """Everything the public read API answers, over a grid of epochs and offsets."""
    return (
        [cache.list_remote_log_segments(e) for e in (None, *range(6))],
        [cache.remote_log_segment_metadata(e, o) for e in range(6) for o in range(0, 4200, 13)],
        [cache.highest_offset_for_epoch(e) for e in range(6)],
        [cache.remote_log_size(e) for e in (None, *range(6))],
        [cache.next_segment_with_txn_index(e, o) for e in range(6) for o in range(0, 4200, 400)],
        [list(cache.walk_remote_log_segments(states)) for states in WALKS],
        [cache.segment_count(states) for states in WALKS],
        [cache.oldest_max_timestamp_ms(states) for states in WALKS],
        [cache.contiguous_end_offset(states) for states in WALKS],
        cache.fingerprint(),
    )


WALKS = (
    None,
    frozenset({S.COPY_SEGMENT_FINISHED}),
    frozenset({S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED}),
    frozenset(),
)


@pytest.mark.parametrize("frozen", [False, True], ids=["arrays", "block"])
@pytest.mark.parametrize("seed", range(4))
def test_a_walk_is_the_listing_of_its_states(seed: int, frozen: bool) -> None:
    """Out-of-order starts, equal starts and equal ranges, every state, dead rows: the
    walk yields what the listing holds in those states, by start then end offset."""
    rng = random.Random(seed)
    cache = RemoteLogMetadataCache(TP)
    starts = [rng.randrange(0, 40) * 10 for _ in range(120)]
    for i, start in enumerate(starts):
        end = start + rng.choice((9, 9, 19))
        m = segment(TP, start, end, {i % 3: start}, size=1 + i)
        m = dataclasses.replace(m, max_timestamp_ms=rng.randrange(1000, 2000))
        if rng.random() < 0.5:
            m = dataclasses.replace(m, remote_log_segment_id=new_rlmm_segment_id(TP))
        cache.add_copy_in_progress_segment(m)
        for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            if rng.random() < 0.5:
                break
            cache.update_remote_log_segment_metadata(update(m, state))
    if frozen:
        cache = RemoteLogMetadataCache.from_block(TP, cache.to_block())
        assert cache.columns.frozen
    listed = cache.list_remote_log_segments()
    assert cache.columns.dead and len(listed) > 40  # the history left dead rows and live ones
    for states in WALKS:
        walked = list(cache.walk_remote_log_segments(states))
        assert sorted(walked, key=lambda m: (m.start_offset, m.end_offset)) == walked
        expected = [m for m in listed if states is None or m.state in states]
        assert sorted(walked, key=lambda m: m.remote_log_segment_id.id) == sorted(
            expected, key=lambda m: m.remote_log_segment_id.id
        )
        # The answers read from the columns, against the objects.
        assert cache.segment_count(states) == len(expected)
        assert cache.oldest_max_timestamp_ms(states) == min(
            (m.max_timestamp_ms for m in expected), default=None
        )
        assert cache.contiguous_end_offset(states) == contiguous_end(walked)
        unsigned = cache.walk_remote_log_segments(states, lambda raw: not is_rlmm_segment_uuid(raw))
        assert [m.remote_log_segment_id for m in unsigned] == [
            m.remote_log_segment_id
            for m in walked
            if not is_rlmm_segment_id(m.remote_log_segment_id)
        ]
        summaries = list(cache.walk_segment_summaries(states))
        assert [c.metadata() for c in summaries] == walked
        assert [
            (
                c.state,
                c.start_offset,
                c.end_offset,
                c.max_timestamp_ms,
                c.segment_size_in_bytes,
                c.segment_leader_epochs,
                c.referenced,
            )
            for c in summaries
        ] == [
            (
                m.state,
                m.start_offset,
                m.end_offset,
                m.max_timestamp_ms,
                m.segment_size_in_bytes,
                dict(m.segment_leader_epochs),
                served(cache, m),
            )
            for m in walked
        ]
    finished = [m for m in listed if m.state == S.COPY_SEGMENT_FINISHED]
    assert any(served(cache, m) for m in finished)
    assert any(not served(cache, m) for m in finished)  # superseded ones too
    assert any(is_rlmm_segment_id(m.remote_log_segment_id) for m in listed)
    assert any(not is_rlmm_segment_id(m.remote_log_segment_id) for m in listed)


def served(cache: RemoteLogMetadataCache, m: RemoteLogSegmentMetadata) -> bool:
    """A lookup of some offset of ``m`` in its leader epoch finds ``m`` (FINISHED only)."""
    return any(
        (found := cache.remote_log_segment_metadata(epoch, max(start, m.start_offset))) is not None
        and found.remote_log_segment_id == m.remote_log_segment_id
        for epoch, start in m.segment_leader_epochs.items()
    )


def contiguous_end(by_start: list[RemoteLogSegmentMetadata]) -> int | None:
    """The end the segments (by start offset) reach from the first before a gap."""
    end = None
    for m in by_start:
        if end is not None and m.start_offset > end + 1:
            break
        end = m.end_offset if end is None else max(end, m.end_offset)
    return end


def history(cache: RemoteLogMetadataCache, seed: int, count: int) -> None:
    """Segments copied in order, most then deleted oldest first (retention), some retried."""
    rng = random.Random(seed)
    live: list[RemoteLogSegmentMetadata] = []
    for i in range(count):
        start = i * 10
        epoch = i // 40
        m = segment(TP, start, start + 9, {epoch: start}, size=rng.randrange(1, 100))
        cache.add_copy_in_progress_segment(m)
        if rng.random() < 0.9:
            cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
            if rng.random() < 0.1:
                retry = update(m, S.COPY_SEGMENT_FINISHED, custom=b"retry")
                cache.update_remote_log_segment_metadata(retry)
        live.append(m)
        if len(live) > 60 and rng.random() < 0.8:
            old = live.pop(0)
            cache.update_remote_log_segment_metadata(update(old, S.DELETE_SEGMENT_STARTED))
            cache.update_remote_log_segment_metadata(update(old, S.DELETE_SEGMENT_FINISHED))


@pytest.mark.parametrize("seed", range(3))
def test_compaction_keeps_every_answer(seed: int) -> None:
    cache = RemoteLogMetadataCache(TP)
    history(cache, seed, 400)
    cols = cache.columns
    assert len(cols) < 400  # dead rows were dropped on the way
    before = reads(cache)
    for row in list(cols.live_rows()):
        assert cache.row_of(cols.segment_id(TP, row)) == row
    cache._compact()  # again, with nothing (or little) to drop
    assert cols.dead == 0 and reads(cache) == before


@pytest.mark.parametrize("seed", range(3))
def test_a_cache_reading_its_block_changes_like_one_that_never_did(seed: int) -> None:
    a = RemoteLogMetadataCache(TP)
    b = RemoteLogMetadataCache(TP)
    history(a, seed, 150)
    history(b, seed, 0)
    b = RemoteLogMetadataCache.from_block(TP, a.to_block())
    assert b.columns.frozen and a.columns.frozen  # both read the block in place
    assert reads(a) == reads(b)
    rng = random.Random(seed)
    for i in range(150, 260):
        m = segment(TP, i * 10, i * 10 + 9, {i // 40: i * 10}, size=rng.randrange(1, 100))
        for c in (a, b):
            c.add_copy_in_progress_segment(m)
            c.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
        if i % 50 == 0:
            a.to_block()  # a freezes again mid-way, b does not
    assert not b.columns.frozen
    assert reads(a) == reads(b)


def legacy_block(cache: RemoteLogMetadataCache) -> bytes:
    """The version-2 block (msgpack lists) an rlmm before the columnar cache wrote."""
    metas = list(cache.segments.values())
    position = {m.remote_log_segment_id: i for i, m in enumerate(metas)}
    epochs = []
    for epoch, st in cache.epochs.items():
        listed = [cache.segment_at(r) for r in st.rows]
        epochs.append(
            [
                epoch,
                list(st.starts),
                list(st.ends),
                [position[m.remote_log_segment_id] for m in listed],
                [position[sid] for sid in st.unreferenced],
                st.highest_offset,
                st.size_bytes,
            ]
        )
    body = [
        2,
        TP.topic_id.bytes,
        TP.partition,
        [segment_to_state(m) for m in metas],
        epochs,
        cache.total_size_bytes,
    ]
    return bytes(msgpack.packb(body, use_bin_type=True))


def test_version_2_blocks_still_load() -> None:
    cache = RemoteLogMetadataCache(TP)
    history(cache, 5, 200)
    old = RemoteLogMetadataCache.from_block(TP, legacy_block(cache))
    assert reads(old) == reads(cache)
    assert RemoteLogMetadataCache.from_block(TP, old.to_block()).fingerprint() == (
        cache.fingerprint()
    )
    body = msgpack.unpackb(legacy_block(cache))
    body[4][0][4] = [len(body[3]) + 1]  # an unreferenced segment past the last
    with pytest.raises(BlockError, match="out of range"):
        RemoteLogMetadataCache.from_block(TP, bytes(msgpack.packb(body)))


def test_a_segment_read_again_is_the_same_object_until_it_changes() -> None:
    cache = RemoteLogMetadataCache(TP)
    m = segment(TP, 0, 99, {0: 0})
    cache.add_copy_in_progress_segment(m)
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    first = cache.remote_log_segment_metadata(0, 5)
    assert first is not None and cache.remote_log_segment_metadata(0, 50) is first
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED, custom=b"x"))
    again = cache.remote_log_segment_metadata(0, 5)
    assert again is not first and again is not None and again.custom_metadata == b"x"
    for i in range(1, 3 * cache_module.MEMO_SIZE):  # the memo stays small
        n = segment(TP, i * 100, i * 100 + 99, {0: i * 100})
        cache.add_copy_in_progress_segment(n)
        cache.update_remote_log_segment_metadata(update(n, S.COPY_SEGMENT_FINISHED))
        cache.remote_log_segment_metadata(0, i * 100)
    assert len(cache._memo) <= cache_module.MEMO_SIZE


def test_memory_per_segment_is_packed() -> None:
    """A segment as rlmm copies it (a manifest of about 60 bytes as its custom metadata)
    costs packed bytes, and no small object of its own: those, kept for good among a
    round's transient objects, pin the interpreter's small-object pools."""
    import gc
    import sys
    import tracemalloc

    manifest = bytes(range(60))
    cache = RemoteLogMetadataCache(TP)

    def keep(first: int, count: int) -> None:
        for i in range(first, first + count):
            m = segment(TP, i * 10, i * 10 + 9, {i // 1000: i * 10})
            cache.add_copy_in_progress_segment(m)
            done = update(m, S.COPY_SEGMENT_FINISHED, custom=manifest[: 40 + i % 20])
            cache.update_remote_log_segment_metadata(done)

    keep(0, 500)  # the columns' first growth steps
    gc.collect()
    blocks = sys.getallocatedblocks()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keep(500, 5000)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    gc.collect()
    objects = sys.getallocatedblocks() - blocks
    assert len(cache.segments) == 5500
    found = cache.remote_log_segment_metadata(5, 54321)
    assert found is not None and found.custom_metadata == manifest[:52]
    assert used / 5000 < 256, f"{used / 5000:.0f} bytes per segment"
    assert objects / 5000 < 0.05, f"{objects / 5000:.2f} small objects kept per segment"


def v3_block(cache: RemoteLogMetadataCache) -> bytes:
    """The version-3 block (one column per field) an rlmm before the records wrote."""
    header, _ = split_block(cache.to_block())
    cols = cache.columns
    records = list(RECORD.iter_unpack(cols.recs))
    uuids = b"".join(r[0] for r in records)
    flat = [cols.epoch_items(row) for row in range(len(cols))]
    ep_first, at = [], 0
    for items in flat:
        ep_first.append(at)
        at += len(items)
    pairs = [pair for items in flat for pair in items]
    header[3] = len(pairs)  # version 3 keeps every epoch in the flat columns
    columns: list[Any] = [uuids]
    columns += [array("q", [r[k] for r in records]) for k in (1, 2, 3, 4)]
    columns.append(array("q", [start for _, start in pairs]))
    columns += [array("i", [r[k] for r in records]) for k in (5, 6)]
    columns += [array("i", ep_first), array("i", [epoch for epoch, _ in pairs])]
    columns.append(bytes(r[8] & 0xFF for r in records))
    body = b"".join(bytes(c) for c in columns)
    body += bytes(-len(body) % 8)
    epochs = list(cache.epochs.values())
    body += b"".join(bytes(st.starts) + bytes(st.ends) for st in epochs)
    body += b"".join(bytes(st.rows) for st in epochs)
    head = msgpack.packb(header, use_bin_type=True)
    prefix = struct.pack("<4sI", b"RLC3", len(head)) + head
    return prefix + bytes(-len(prefix) % 8) + body


@pytest.mark.parametrize("seed", range(2))
def test_version_3_blocks_still_load(seed: int) -> None:
    cache = RemoteLogMetadataCache(TP)
    history(cache, seed, 300)
    m = segment(TP, 5000, 5009, {7: 5000}, size=3)  # one segment with custom metadata
    cache.add_copy_in_progress_segment(m)
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED, custom=b"c"))
    old = v3_block(cache)
    restored = RemoteLogMetadataCache.from_block(TP, old)
    assert reads(restored) == reads(cache)
    assert not restored.columns.frozen  # copied into records, and re-encoded as version 4
    block = restored.to_block()
    assert block[:4] == b"RLC4" and block != old
    assert reads(RemoteLogMetadataCache.from_block(TP, block)) == reads(cache)
    restored.add_copy_in_progress_segment(segment(TP, 6000, 6009, {7: 6000}))
    with pytest.raises(BlockError):
        RemoteLogMetadataCache.from_block(TP, old[: len(old) - 100])


def test_segments_with_more_epochs_than_the_count_field_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metas = []
    for i in range(200):
        start = i * 10
        epochs = {i // 40 + k: start + 3 * k for k in range(1 + i % 4)}
        metas.append(segment(TP, start, start + 9, epochs, size=i + 1))

    def build() -> RemoteLogMetadataCache:
        cache = RemoteLogMetadataCache(TP)
        for i, m in enumerate(metas):
            cache.add_copy_in_progress_segment(m)
            cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
            if i % 3 == 0:
                cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED))
                cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
        return cache

    plain = build()
    # Saturate the count field at 2: rows with more epochs are bounded by the next row.
    monkeypatch.setattr(columns_module, "MANY", 2)
    saturated = build()
    assert any(r[8] >> 8 == 2 for r in RECORD.iter_unpack(saturated.columns.recs))
    assert reads(saturated) == reads(plain)
    again = RemoteLogMetadataCache.from_block(TP, saturated.to_block())
    assert reads(again) == reads(plain)
    saturated._compact()
    assert reads(saturated) == reads(plain)


def test_a_record_is_one_aligned_cache_line() -> None:
    cache = RemoteLogMetadataCache(TP)
    history(cache, 1, 50)
    block = cache.to_block()
    _, rest = split_block(block)
    records_at = len(block) - len(rest)
    assert RECORD.size == 64 and records_at % 8 == 0
    assert bytes(cache.columns.recs) == rest[: 64 * len(cache.columns)]


def test_a_single_epoch_from_the_segment_start_is_inline() -> None:
    cache = RemoteLogMetadataCache(TP)
    inline = segment(TP, 0, 9, {4: 0})
    apart = segment(TP, 10, 19, {4: 8})  # the epoch began before the segment
    huge = segment(TP, 20, 29, {(1 << 31) - 1: 20})  # too big to store as -(epoch + 1)
    for m in (inline, apart, huge):
        cache.add_copy_in_progress_segment(m)
        cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    firsts = [r[7] for r in RECORD.iter_unpack(cache.columns.recs)]
    assert firsts == [-5, 0, 1] and cache.columns.pairs == 2
    listed = cache.list_remote_log_segments()
    assert [m.remote_log_segment_id for m in listed] == [
        m.remote_log_segment_id for m in (inline, apart, huge)
    ]
    assert [m.segment_leader_epochs for m in listed] == [
        m.segment_leader_epochs for m in (inline, apart, huge)
    ]
    for epoch, offset, m in ((4, 5, inline), (4, 15, apart), ((1 << 31) - 1, 25, huge)):
        found = cache.remote_log_segment_metadata(epoch, offset)
        assert found is not None and found.remote_log_segment_id == m.remote_log_segment_id
    again = RemoteLogMetadataCache.from_block(TP, cache.to_block())
    assert reads(again) == reads(cache)
