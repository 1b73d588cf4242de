"""The lineage: FINISHED segments along the leader-epoch chain, superseded ones never read."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.archive.lineage import Gap, epoch_chain, gaps, lineage_ranges
from rlmm.cache import RemoteLogMetadataCache
from rlmm.model import RemoteLogSegmentMetadata
from tests.rlmm.factories import S, segment, tp, update

TP = tp(0)


def finished(
    cache: RemoteLogMetadataCache, start: int, end: int, epochs: Mapping[int, int]
) -> RemoteLogSegmentMetadata:
    m = segment(TP, start, end, epochs)
    cache.add_copy_in_progress_segment(m)
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    return cache.segments[m.remote_log_segment_id]


def spans(cache: RemoteLogMetadataCache) -> list[tuple[int, int, int]]:
    return [(r.segment.start_offset, r.first_offset, r.last_offset) for r in lineage_ranges(cache)]


def test_plain_history_is_every_segment() -> None:
    cache = RemoteLogMetadataCache(TP)
    for i in range(4):
        finished(cache, i * 100, i * 100 + 99, {0: i * 100})
    assert spans(cache) == [(i * 100, i * 100, i * 100 + 99) for i in range(4)]
    assert gaps(lineage_ranges(cache)) == []


def test_re_upload_by_a_new_leader_supersedes_the_old_copy() -> None:
    cache = RemoteLogMetadataCache(TP)
    old = finished(cache, 0, 99, {0: 0})
    new = finished(cache, 0, 150, {0: 0, 1: 80})  # new leader truncated at 80
    ranges = lineage_ranges(cache)
    assert [r.segment for r in ranges] == [new]
    assert (ranges[0].first_offset, ranges[0].last_offset) == (0, 150)
    assert old not in [r.segment for r in ranges]


def test_records_an_old_leader_wrote_past_the_next_epoch_are_not_served() -> None:
    cache = RemoteLogMetadataCache(TP)
    a = finished(cache, 0, 99, {0: 0})  # epoch 0 leader wrote up to 99
    b = finished(cache, 50, 150, {0: 50, 1: 80})  # epoch 1 starts at 80
    assert epoch_chain(cache) == [(0, 0, 79), (1, 80, 150)]
    ranges = lineage_ranges(cache)
    assert [(r.segment, r.first_offset, r.last_offset) for r in ranges] == [
        (a, 0, 79),
        (b, 80, 150),
    ]


def test_an_epoch_truncated_away_is_not_on_the_lineage() -> None:
    cache = RemoteLogMetadataCache(TP)
    finished(cache, 0, 59, {0: 0})
    zombie = finished(cache, 60, 120, {1: 60})  # epoch 1's leader; its records were lost
    c = finished(cache, 40, 200, {0: 40, 2: 60})  # epoch 2 truncated to 59, skipping epoch 1
    ranges = lineage_ranges(cache)
    assert zombie not in [r.segment for r in ranges]
    assert [(r.first_offset, r.last_offset) for r in ranges] == [(0, 59), (60, 200)]
    assert ranges[-1].segment is c


def test_a_missing_segment_is_a_gap_and_deleting_ones_are_not_read() -> None:
    cache = RemoteLogMetadataCache(TP)
    finished(cache, 0, 99, {0: 0})
    deleting = finished(cache, 100, 199, {0: 100})
    finished(cache, 200, 299, {0: 200})
    finished(cache, 400, 499, {0: 400})
    cache.update_remote_log_segment_metadata(update(deleting, S.DELETE_SEGMENT_STARTED))
    started = segment(TP, 300, 399, {0: 300})
    cache.add_copy_in_progress_segment(started)  # not finished: not readable
    assert gaps(lineage_ranges(cache)) == [Gap(100, 199), Gap(300, 399)]


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, int, dict[int, int], str]]:
    """Random segment copies: (start, end, leader epochs, final state)."""
    out = []
    for _ in range(draw(st.integers(1, 12))):
        start = draw(st.integers(0, 300))
        end = start + draw(st.integers(0, 80))
        first_epoch = draw(st.integers(0, 5))
        epochs = {first_epoch: start}
        cut = start
        for epoch in range(first_epoch + 1, first_epoch + draw(st.integers(0, 3)) + 1):
            cut = draw(st.integers(cut + 1, end + 1))
            if cut > end:
                break
            epochs[epoch] = cut
        state = draw(st.sampled_from(["finished", "finished", "started", "deleting"]))
        out.append((start, end, epochs, state))
    return out


@settings(max_examples=300, deadline=None)
@given(histories())
def test_lineage_invariants(history: list[tuple[int, int, dict[int, int], str]]) -> None:
    cache = RemoteLogMetadataCache(TP)
    for start, end, epochs, state in history:
        if state == "started":
            cache.add_copy_in_progress_segment(segment(TP, start, end, epochs))
            continue
        m = finished(cache, start, end, epochs)
        if state == "deleting":
            cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED))
    ranges = lineage_ranges(cache)
    for r in ranges:
        # only FINISHED segments, each serving offsets it holds
        assert r.segment.state == S.COPY_SEGMENT_FINISHED
        assert r.segment.start_offset <= r.first_offset <= r.last_offset <= r.segment.end_offset
    for a, b in pairwise(ranges):
        assert a.last_offset < b.first_offset  # sorted, no offset served twice
    # Every FINISHED segment's epoch ranges that start after the previous epoch on the
    # chain are either served or covered by a later epoch (nothing silently dropped
    # unless superseded): offsets served are a union of segment epoch ranges.
    chain = epoch_chain(cache)
    for (_, first_a, last_a), (_, first_b, _) in pairwise(chain):
        assert first_a <= last_a < first_b
