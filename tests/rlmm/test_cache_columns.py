"""The columnar cache's own mechanics: dead rows and compaction, a cache reading its
block in place and then changing, version-2 blocks from before the columns, and the
object memo. Every check compares with what the public reads answered before."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from rlmm import cache as cache_module
from rlmm._cache_block import BlockError, segment_to_state
from rlmm.cache import RemoteLogMetadataCache
from rlmm.model import RemoteLogSegmentMetadata
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
        cache.fingerprint(),
    )


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
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = RemoteLogMetadataCache(TP)
    for i in range(5000):
        m = segment(TP, i * 10, i * 10 + 9, {i // 1000: i * 10})
        cache.add_copy_in_progress_segment(m)
        cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(cache.segments) == 5000
    assert used / 5000 < 256, f"{used / 5000:.0f} bytes per segment"
