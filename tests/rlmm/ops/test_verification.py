"""rlmm.ops.verification and rlmm.ops.repair in process: the safety window, the topic filter,
a plan that meets a changed state, and the event dump / snapshot report edge cases."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from eventlog._batch import encode_batch
from remote.layouts.rlmm_layout import RlmmLayout
from remote.storage import IndexType
from rlmm.archive import open_metadata_view
from rlmm.codec import encode
from rlmm.model import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from rlmm.ops.event_dump import dump_segment_file
from rlmm.ops.repair import apply_repairs, plan_repairs
from rlmm.ops.snapshot_report import inspect_snapshot
from rlmm.ops.verification import ProblemKind, verify
from tests.rlmm.cli.store import (
    HOUR_MS,
    build_store,
    seed_orphan,
    sid,
    stuck_started,
    with_manager,
)


def kinds(report: object) -> list[str]:
    return sorted(p.kind.value for p in report.problems)  # type: ignore[attr-defined]


def test_safety_window_and_topic_filter(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    rsm = store.rsm()
    try:
        orphans = seed_orphan(store, rsm, age_ms=0)
        with open_metadata_view(store.config) as view:
            assert verify(view, RlmmLayout(rsm)).ok  # young: maybe a copy in flight
            later = int(time.time() * 1000) + 2 * HOUR_MS
            aged = verify(view, RlmmLayout(rsm), now_ms=later)
            assert {(p.kind, p.object_name) for p in aged.problems} == {
                (ProblemKind.ORPHAN_OBJECT, name) for _, _, name in orphans
            }
            assert verify(view, RlmmLayout(rsm), now_ms=later, topic="other").ok
            assert verify(view, RlmmLayout(rsm), now_ms=later, safety_window_s=3 * 3600).ok
    finally:
        rsm.close()


def test_repair_leaves_a_segment_whose_state_changed(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    started = stuck_started(store)
    rsm = store.rsm()
    try:
        with open_metadata_view(store.config) as view:
            report = verify(view, RlmmLayout(rsm))
        assert kinds(report) == ["stuck_copy_started"]
        plan = plan_repairs(report)

        async def finish(manager, rsm_):  # type: ignore[no-untyped-def]
            await manager.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    started.remote_log_segment_id,
                    int(time.time() * 1000),
                    None,
                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    0,
                )
            )

        asyncio.run(with_manager(store.config, [started.topic_id_partition], finish))
        apply_repairs(store.config, RlmmLayout(rsm), plan)
        assert plan.done == []
        assert [(a.problem.segment_id, why) for a, why in plan.skipped] == [
            (
                sid(started),
                "state changed since verify (COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED)",
            )
        ]
        assert any(sid(started) in o.name for o in rsm.list_objects())  # untouched
    finally:
        rsm.close()


def test_event_dump_reports_undecodable_values_and_goes_on(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    m = next(iter(store.segments.values()))[0]
    part = tmp_path / "__remote_log_metadata-3"
    part.mkdir()
    batches = [
        encode_batch(0, [(None, encode(m))], 1),
        encode_batch(1, [(None, b"\x01\x00\x00not an event"), (None, encode(m))], 1),
    ]
    path = part / f"{0:020d}.log"
    path.write_bytes(b"".join(batches))
    dumped = list(dump_segment_file(path))
    assert [(d.metadata_partition, d.offset, d.error is None) for d in dumped] == [
        (3, 0, True),
        (3, 1, False),
        (3, 2, True),
    ]
    assert dumped[0].event == m and "cannot decode" in str(dumped[1].error)


def test_snapshot_report_of_foreign_or_truncated_files(tmp_path: Path) -> None:
    truncated = tmp_path / "snapshot-00000000000000000001.rlmm"
    truncated.write_bytes(b"RLMMSNAP\x00\x01")
    report = inspect_snapshot(truncated)
    assert not report.ok and "truncated" in str(report.problem)
    assert report.to_dict()["path"] == str(truncated)


def test_every_problem_kind_has_its_remedy_in_the_output_and_the_docs() -> None:
    from pathlib import Path

    from rlmm.ops.verification import REMEDIES, Problem

    docs = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    for kind in ProblemKind:
        remedy = REMEDIES[kind]
        assert Problem(kind, "t", 0, "d").to_dict()["remedy"] == remedy
        assert f"- `{kind.value}`: {remedy}" in docs, kind


def test_a_pool_of_workers_reports_what_one_worker_does(tmp_path: Path) -> None:
    """Segments are checked by a pool of threads; the report (problems in order,
    counts, bytes read) is the same as one at a time, deep or not."""
    store = build_store(tmp_path)
    stuck_started(store)
    rsm = store.rsm()
    try:
        seed_orphan(store, rsm, age_ms=0)
        with open_metadata_view(store.config) as view:
            layout = RlmmLayout(rsm)
            victims = [m for tp in view.topic_partitions() for m in view.segments(tp)
                       if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED][1::3]  # fmt: skip
            for m in victims:  # a missing index in every third finished segment
                name = layout.index_object_name(m, IndexType.OFFSET)
                (Path(store.config.remote_options()["root"]) / name).unlink()
            later = int(time.time() * 1000) + 2 * HOUR_MS
            for deep in (False, True):
                one = verify(view, layout, deep=deep, now_ms=later, workers=1)
                many = verify(view, layout, deep=deep, now_ms=later, workers=8)
                assert len(one.problems) >= len(victims) + 2
                assert many.to_dict() == one.to_dict()
    finally:
        rsm.close()
