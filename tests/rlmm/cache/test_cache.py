"""The per-partition cache: Kafka's RemoteLogMetadataCacheTest, RemoteLogLeaderEpochStateTest
and RemoteLogSegmentLifecycleTest scenarios, in our own words."""

from __future__ import annotations

import random

import pytest

from rlmm.cache import RemoteLogLeaderEpochState, RemoteLogMetadataCache
from rlmm.errors import InvalidStateTransitionError, RemoteResourceNotFoundError
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, kafka_uuid_to_str
from tests.rlmm.factories import S, segment, tp, update

TP = tp()


def copied(cache: RemoteLogMetadataCache, m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    cache.add_copy_in_progress_segment(m)
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    return m


@pytest.fixture
def lifecycle() -> tuple[RemoteLogMetadataCache, list[RemoteLogSegmentMetadata]]:
    cache = RemoteLogMetadataCache(TP)
    s0 = copied(cache, segment(TP, 0, 100, {0: 0, 1: 20, 2: 80}, size=100))
    s1 = copied(cache, segment(TP, 101, 200, {2: 101}, size=200))
    s2 = copied(cache, segment(TP, 201, 300, {2: 201, 3: 240}, size=300))
    s3 = copied(cache, segment(TP, 250, 400, {3: 250, 4: 370}, size=400))
    return cache, [s0, s1, s2, s3]


def ids(ms: list[RemoteLogSegmentMetadata] | None) -> list[RemoteLogSegmentId]:
    return [m.remote_log_segment_id for m in ms or []]


def test_lifecycle_point_lookups(lifecycle: tuple) -> None:
    cache, (s0, s1, s2, s3) = lifecycle
    expected = {(1, 40): s0, (2, 110): s1, (3, 240): s2, (3, 250): s3, (4, 375): s3}
    for (epoch, offset), want in expected.items():
        got = cache.remote_log_segment_metadata(epoch, offset)
        assert got is not None and got.remote_log_segment_id == want.remote_log_segment_id
        assert got.state == S.COPY_SEGMENT_FINISHED
    for epoch, offset in [(1, 110), (4, 401), (5, 301), (0, 20), (2, 79)]:
        assert cache.remote_log_segment_metadata(epoch, offset) is None


def test_lifecycle_highest_offsets(lifecycle: tuple) -> None:
    cache, _ = lifecycle
    assert [cache.highest_offset_for_epoch(e) for e in range(5)] == [19, 79, 239, 369, 400]
    assert cache.highest_offset_for_epoch(5) is None


def test_lifecycle_listing_and_sizes(lifecycle: tuple) -> None:
    cache, (s0, s1, s2, s3) = lifecycle
    assert ids(cache.list_remote_log_segments()) == ids([s0, s1, s2, s3])
    assert ids(cache.list_remote_log_segments(2)) == ids([s0, s1, s2])
    assert ids(cache.list_remote_log_segments(3)) == ids([s2, s3])
    assert cache.list_remote_log_segments(9) == []
    assert cache.remote_log_size() == 1000
    assert cache.remote_log_size(2) == 600
    assert cache.remote_log_size(3) == 700
    assert cache.remote_log_size(4) == 400
    assert cache.remote_log_size(7) == 0


def test_lifecycle_delete(lifecycle: tuple) -> None:
    cache, (s0, s1, s2, s3) = lifecycle
    cache.update_remote_log_segment_metadata(update(s1, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(2, 110) is None
    # still listed (deletion may be retried) and still counted
    assert ids(cache.list_remote_log_segments(2)) == ids([s0, s1, s2])
    assert cache.remote_log_size(2) == 600
    cache.update_remote_log_segment_metadata(update(s1, S.DELETE_SEGMENT_FINISHED))
    assert ids(cache.list_remote_log_segments(2)) == ids([s0, s2])
    assert cache.remote_log_size(2) == 400 and cache.remote_log_size() == 800
    with pytest.raises(RemoteResourceNotFoundError):
        cache.update_remote_log_segment_metadata(update(s1, S.DELETE_SEGMENT_FINISHED))
    # delete every segment: epochs vanish
    for m in (s0, s2, s3):
        cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED))
        cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
    assert cache.epochs == {} and cache.segments == {} and cache.remote_log_size() == 0


def test_started_segment_is_listed_but_not_returned() -> None:
    cache = RemoteLogMetadataCache(TP)
    m = segment(TP, 0, 100, {0: 0})
    cache.add_copy_in_progress_segment(m)
    assert cache.remote_log_segment_metadata(0, 50) is None
    assert ids(cache.list_remote_log_segments(0)) == ids([m])
    assert cache.highest_offset_for_epoch(0) is None
    assert cache.remote_log_size(0) == m.segment_size_in_bytes


def test_invalid_operations_change_nothing() -> None:
    cache = RemoteLogMetadataCache(TP)
    m = segment(TP, 0, 100, {0: 0})
    finished = RemoteLogSegmentMetadata(
        **{f: getattr(m, f) for f in m.__dataclass_fields__} | {"state": S.COPY_SEGMENT_FINISHED}
    )
    with pytest.raises(InvalidStateTransitionError, match="COPY_SEGMENT_STARTED"):
        cache.add_copy_in_progress_segment(finished)
    with pytest.raises(
        RemoteResourceNotFoundError, match=kafka_uuid_to_str(m.remote_log_segment_id.id)
    ):
        cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    cache.add_copy_in_progress_segment(m)
    before = cache.fingerprint()
    with pytest.raises(InvalidStateTransitionError, match="already exists"):
        cache.add_copy_in_progress_segment(m)
    with pytest.raises(
        InvalidStateTransitionError, match="COPY_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED"
    ):
        cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
    assert cache.fingerprint() == before


def test_idempotent_retry_of_same_state() -> None:
    cache = RemoteLogMetadataCache(TP)
    m = copied(cache, segment(TP, 0, 100, {0: 0}))
    before = cache.fingerprint()
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED, custom=b"c"))
    got = cache.remote_log_segment_metadata(0, 1)
    assert got is not None and got.custom_metadata == b"c"
    assert cache.fingerprint()[1:] == before[1:]


# ---- leader epoch state: Kafka's RemoteLogLeaderEpochStateTest ---------------------------
# The epoch index holds segments as row numbers of the partition's columns.


def test_epoch_state_duplicate_segment_supersedes() -> None:
    st = RemoteLogLeaderEpochState()
    s0, s1 = 0, 1
    st.add_started(s0)
    st.add_finished(0, s0, 100)
    st.add_started(s1)
    st.add_finished(0, s1, 200)  # the new leader re-uploaded 0-200
    assert st.floor(50) == s1 and st.unreferenced_rows == {s0} and st.highest_offset == 200


def test_epoch_state_overlapping_segments() -> None:
    st = RemoteLogLeaderEpochState()
    s0, s1, s2 = 0, 1, 2
    st.add_finished(10, s0, 90)
    st.add_finished(5, s1, 100)  # starts earlier, reaches further: supersedes s0
    st.add_finished(101, s2, 200)
    assert st.floor(95) == s1 and st.floor(150) == s2 and st.floor(4) == -1
    assert st.unreferenced_rows == {s0}
    assert list(st.starts) == [5, 101]


def test_epoch_state_multiple_overlapping_segments() -> None:
    st = RemoteLogLeaderEpochState()
    old = [0, 1, 2, 3]
    for i, s in enumerate(old):
        st.add_finished(i * 10, s, i * 10 + 9)
    new = 4
    st.add_finished(5, new, 60)  # covers 10..39 and half of 0..9
    assert list(st.starts) == [0, 5] and list(st.rows) == [old[0], new]
    assert st.unreferenced_rows == set(old[1:])
    assert st.highest_offset == 60


def test_epoch_state_shorter_reupload_does_not_supersede_longer() -> None:
    st = RemoteLogLeaderEpochState()
    st.add_finished(0, 0, 100)
    st.add_finished(50, 1, 80)  # ends before what the epoch already has
    assert list(st.starts) == [0, 50] and st.highest_offset == 100


def test_epoch_state_same_start_offset_replaces() -> None:
    st = RemoteLogLeaderEpochState()
    s0, s1, s2 = 0, 1, 2
    st.add_finished(0, s0, 100)
    st.add_finished(100, s1, 150)
    st.add_finished(100, s2, 120)  # same start, shorter: replaces the mapping at 100
    assert st.floor(110) == s2 and s1 in st.unreferenced_rows
    assert st.highest_offset == 150


def test_epoch_state_delete_started_and_finished() -> None:
    st = RemoteLogLeaderEpochState()
    st.add_finished(0, 0, 100)
    st.mark_deleting(0, 0)
    assert st.floor(5) == -1 and st.unreferenced_rows == {0}
    st.remove(0)
    assert st.is_empty()


def test_epoch_state_object_views_through_the_cache() -> None:
    cache = RemoteLogMetadataCache(TP)
    a = copied(cache, segment(TP, 0, 99, {0: 0}))
    b = segment(TP, 100, 199, {0: 100})
    cache.add_copy_in_progress_segment(b)
    st = cache.epochs[0]
    assert [m.remote_log_segment_id for m in st.metas] == [a.remote_log_segment_id]
    assert st.unreferenced == {b.remote_log_segment_id}


def test_next_segment_with_txn_index() -> None:
    cache = RemoteLogMetadataCache(TP)
    a = copied(cache, segment(TP, 0, 99, {0: 0}, txn_index_empty=True))
    b = copied(cache, segment(TP, 100, 199, {0: 100}, txn_index_empty=True))
    c = copied(cache, segment(TP, 200, 299, {0: 200, 1: 250}, txn_index_empty=False))
    d = copied(cache, segment(TP, 300, 399, {1: 300}, txn_index_empty=False))
    assert cache.next_segment_with_txn_index(0, 0) == cache.segments[c.remote_log_segment_id]
    assert cache.next_segment_with_txn_index(0, 150) == cache.segments[c.remote_log_segment_id]
    assert cache.next_segment_with_txn_index(0, 260) is None  # epoch 0 ends at 249
    assert cache.next_segment_with_txn_index(1, 0) == cache.segments[c.remote_log_segment_id]
    assert cache.next_segment_with_txn_index(1, 300) == cache.segments[d.remote_log_segment_id]
    assert cache.next_segment_with_txn_index(1, 299) == cache.segments[c.remote_log_segment_id]
    assert cache.next_segment_with_txn_index(2, 0) is None
    assert a and b


def test_state_round_trip_after_random_history() -> None:
    rng = random.Random(7)
    cache = RemoteLogMetadataCache(TP)
    live: list[RemoteLogSegmentMetadata] = []
    for i in range(300):
        start = rng.randrange(0, 2000)
        end = start + rng.randrange(0, 200)
        e0 = rng.randrange(0, 5)
        epochs = {e0: start} if rng.random() < 0.6 else {e0: start, e0 + 1: (start + end) // 2 + 1}
        if max(epochs.values()) > end:
            epochs = {e0: start}
        m = segment(TP, start, end, epochs, size=rng.randrange(1, 1000), txn_index_empty=i % 3 == 0)
        cache.add_copy_in_progress_segment(m)
        live.append(m)
        for m2 in rng.sample(live, min(3, len(live))):
            current = cache.segments.get(m2.remote_log_segment_id)
            if current is None:
                continue
            nxt = {
                S.COPY_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
                S.COPY_SEGMENT_FINISHED: [S.DELETE_SEGMENT_STARTED],
                S.DELETE_SEGMENT_STARTED: [S.DELETE_SEGMENT_FINISHED],
            }[current.state]
            cache.update_remote_log_segment_metadata(update(m2, rng.choice(nxt)))
    copy = RemoteLogMetadataCache.from_state(TP, cache.to_state())
    assert copy.fingerprint() == cache.fingerprint()
    for epoch in range(7):
        for offset in range(0, 2300, 7):
            assert copy.remote_log_segment_metadata(epoch, offset) == (
                cache.remote_log_segment_metadata(epoch, offset)
            )
        assert copy.remote_log_size(epoch) == sum(
            m.segment_size_in_bytes for m in cache.list_remote_log_segments(epoch)
        )
