"""The fast copy of SegmentColumns.metadata and the constructors' copy build equal
objects, the probe at import checks the copy that runs, and RLMM_NO_FAST_PATHS (or a
failed probe) installs the constructors' copy."""

from __future__ import annotations

import dataclasses
import random

import pytest

from rlmm import _fast_paths
from rlmm.cache import RemoteLogMetadataCache
from rlmm.cache._columns import FAST_METADATA, FAST_OBJECTS, SegmentColumns
from rlmm.cache._objects import fast_path_works
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition
from tests.rlmm.factories import S, segment, tp, update

TP = tp(5)


def test_the_copy_that_runs_is_the_one_the_probe_passed() -> None:
    assert FAST_OBJECTS is _fast_paths.ALLOWED  # the probe passes here, unless switched off
    expected = FAST_METADATA if FAST_OBJECTS else SegmentColumns.metadata_by_constructors
    assert SegmentColumns.metadata is expected
    # whatever runs, the fast copy still equals the constructors' one
    assert fast_path_works(FAST_METADATA, SegmentColumns)


def test_the_probe_fails_a_fast_copy_that_differs() -> None:
    def off_by_one(
        cols: SegmentColumns, tp: TopicIdPartition, row: int
    ) -> RemoteLogSegmentMetadata:
        m = FAST_METADATA(cols, tp, row)
        return dataclasses.replace(m, broker_id=m.broker_id + 1)

    def refused(cols: SegmentColumns, tp: TopicIdPartition, row: int) -> RemoteLogSegmentMetadata:
        raise TypeError("__class__ assignment only supported for mutable types")

    assert not fast_path_works(off_by_one, SegmentColumns)
    assert not fast_path_works(refused, SegmentColumns)


@pytest.mark.parametrize("seed", range(3))
def test_both_copies_agree_on_every_row(seed: int) -> None:
    rng = random.Random(seed)
    cache = RemoteLogMetadataCache(TP)
    for i in range(300):
        start = i * 10
        epochs = {i // 40 + k: start + rng.randrange(3) * k for k in range(1 + rng.randrange(4))}
        m = segment(TP, start, start + 9, epochs, size=i + 1, txn_index_empty=i % 2 == 0)
        cache.add_copy_in_progress_segment(m)
        if rng.random() < 0.8:
            custom = rng.choice([None, b"", b"custom"])
            cache.update_remote_log_segment_metadata(
                update(m, S.COPY_SEGMENT_FINISHED, custom=custom)
            )
    cols = cache.columns
    for row in range(len(cols)):
        fast, slow = FAST_METADATA(cols, TP, row), cols.metadata_by_constructors(TP, row)
        assert type(fast) is type(slow) is RemoteLogSegmentMetadata
        assert fast == slow and repr(fast) == repr(slow)
        assert hash(fast.remote_log_segment_id) == hash(slow.remote_log_segment_id)
