"""An object is garbage unless it is one of a live segment's own objects (issue 28): a
file with a live segment's id under another start offset is an orphan, found by verify
and removed by gc alone; the live segment's own objects stay."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from remote.layouts.rlmm_layout import RlmmLayout
from remote.topic_configs import TopicConfigs, TopicConfigStore
from rlmm.archive import open_metadata_view
from rlmm.model import kafka_uuid_to_str
from rlmm.ops.repair import apply_repairs, plan_repairs
from rlmm.ops.verification import ProblemKind, verify
from snapshot.store import SUBPREFIX
from tests.rlmm.cli.store import HOUR_MS, build_store


def test_a_live_ids_object_under_another_name_is_an_orphan(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    rsm = store.rsm()
    layout = RlmmLayout(rsm)
    try:
        with open_metadata_view(store.config) as view:
            tp = next(tp for tp in view.topic_partitions() if tp.partition == 0)
            live = view.segments(tp)[0]
            own = layout.log_object_name(live)
            root = Path(store.config.remote_options()["root"])
            stray = own.replace(f"/{live.start_offset:020d}-", "/00000000000000999999-")
            shutil.copyfile(root / own, root / stray)
            later = int(time.time() * 1000) + 2 * HOUR_MS
            report = verify(view, layout, now_ms=later)
        assert [(p.kind, p.object_name) for p in report.problems] == [
            (ProblemKind.ORPHAN_OBJECT, stray)
        ]
        assert "none of that segment's objects" in report.problems[0].detail
        before = {o.name for o in rsm.list_objects()}
        plan = apply_repairs(store.config, layout, plan_repairs(report))
        assert len(plan.done) == 1
        assert {o.name for o in rsm.list_objects()} == before - {stray}
        with open_metadata_view(store.config) as view:
            assert verify(view, layout, now_ms=later).ok
    finally:
        rsm.close()


def test_a_topic_s_kept_configs_are_rlmm_s_own_not_outside_the_layout(tmp_path: Path) -> None:
    """The sidecar keeps each topic's configs beside the segments (for restore):
    verify neither calls them orphans nor counts them among names it leaves alone."""
    store = build_store(tmp_path)
    rsm = store.rsm()
    try:
        with open_metadata_view(store.config) as view:
            tp = next(iter(view.topic_partitions()))
            kept = TopicConfigStore(Path(store.config.remote_options()["root"]))
            kept.write(TopicConfigs(tp.topic, kafka_uuid_to_str(tp.topic_id), {"a": "b"}))
            later = int(time.time() * 1000) + 2 * HOUR_MS
            report = verify(view, RlmmLayout(rsm), now_ms=later)
        assert report.ok and report.skipped_outside_layout == 0
    finally:
        rsm.close()


def test_metadata_snapshots_beside_the_segments_are_rlmm_s_own_not_outside_the_layout(
    tmp_path: Path,
) -> None:
    """An S3 snapshot store sharing the segments' prefix keeps the metadata snapshots
    under ``__snapshots/``: verify leaves them alone without counting them."""
    store = build_store(tmp_path)
    rsm = store.rsm()
    try:
        root = Path(store.config.remote_options()["root"])
        kept = root / SUBPREFIX / "broker-0" / "snapshot-00000000000000000001.rlmm"
        kept.parent.mkdir(parents=True)
        kept.write_bytes(b"a snapshot")
        with open_metadata_view(store.config) as view:
            later = int(time.time() * 1000) + 2 * HOUR_MS
            report = verify(view, RlmmLayout(rsm), now_ms=later)
        assert report.ok and report.skipped_outside_layout == 0
        assert kept.exists()
    finally:
        rsm.close()
