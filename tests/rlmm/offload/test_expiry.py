"""plan_expiry: Kafka's expiration walk as a pure function."""

from __future__ import annotations

import uuid

from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.offload import RetentionSettings, plan_expiry

TP = TopicIdPartition(uuid.uuid4(), "t", 0)
S = RemoteLogSegmentState


def seg(start: int, state: S = S.COPY_SEGMENT_FINISHED, ts: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(TP),
        start,
        start + 99,
        ts,
        0,
        0,
        100,
        {0: start},
        state=state,
    )


def plan(segments: list[RemoteLogSegmentMetadata], **kw: object) -> list[tuple[int, str]]:
    options: dict[str, object] = {
        "referenced": lambda m: True,
        "retention": RetentionSettings(-1, -1),
        "log_start_offset": 0,
        "local_only_bytes": 0,
        "now_ms": 10_000,
    }
    options.update(kw)
    listed = sorted(segments, key=lambda m: (m.start_offset, m.end_offset))
    return [(m.start_offset, reason) for m, reason in plan_expiry(lambda: listed, **options)]  # type: ignore[arg-type]


def test_time_size_and_log_start() -> None:
    segs = [seg(0, ts=1), seg(100, ts=2), seg(200, ts=9_000), seg(300, ts=9_500)]
    assert plan(segs, retention=RetentionSettings(retention_ms=5_000)) == [
        (0, "retention.ms"),
        (100, "retention.ms"),
    ]
    # 400 remote + 50 local-only bytes, 250 allowed: only whole segments within the breach go
    assert plan(segs, retention=RetentionSettings(-1, 250), local_only_bytes=50) == [
        (0, "retention.bytes"),
        (100, "retention.bytes"),
    ]
    assert plan(segs, log_start_offset=150) == [(0, "log-start")]


def test_walk_stops_at_a_segment_being_copied_and_at_the_first_kept() -> None:
    segs = [seg(0, ts=1), seg(100, S.COPY_SEGMENT_STARTED), seg(100, ts=1), seg(200, ts=1)]
    assert plan(segs, retention=RetentionSettings(retention_ms=5_000)) == [(0, "retention.ms")]
    kept_first = [seg(0, ts=9_999), seg(100, ts=1)]
    assert plan(kept_first, retention=RetentionSettings(retention_ms=5_000)) == []


def test_superseded_segments_go_wherever_they_are() -> None:
    old = seg(300)
    segs = [seg(0), seg(100), old]
    assert plan(segs, referenced=lambda m: m is not old) == [(300, "superseded")]
