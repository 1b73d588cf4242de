"""Restore plans over a real archive (rlmm's layout, offloaded through the manager):
the store alone gives the same segments and plan as the metadata, also where rlmm's
snapshots give the copies they hold (the manager's own at its stop, one holding only
older copies, and unreadable ones, which leave the objects to give everything); bad
input is named; a gap stops the plan or is skipped; a resume point cuts the plan, not
the range."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from remote import IndexType
from remote.segments import PartitionDir
from rlmm.archive import MetadataView, open_metadata_view, remote_storage_for, store_view
from rlmm.archive.reader import read_slice
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.config import RlmmConfig
from rlmm.factory import open_snapshot_source
from rlmm.model import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from rlmm.restore import (
    RangeOutsideArchiveError,
    RestoreInputError,
    RestorePlan,
    RestoreSelection,
    SharedTargetError,
    UnknownSourceError,
    build_plan,
    restore_topics,
    store_metadata_view,
)
from snapshot import Snapshot, SnapshotStore, decode_snapshot, encode_snapshot
from snapshot.local import LocalSnapshotStore
from tests.rlmm.archive.archive_data import Expected, archived, make_config, offload, rows
from tests.rlmm.archive.archive_data import write_history as history

TOPIC = "r"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[RlmmConfig, dict[int, list[Any]]]:
    tmp = tmp_path_factory.mktemp("restore")
    config = make_config(tmp / "rlmm")
    topic_id = uuid.uuid4()
    expected: dict[int, list[Expected]] = {}
    for p, codec in ((0, "none"), (1, "gzip")):
        pdir, written = history(tmp / "logs", TOPIC, p, codec, topic_id=topic_id)
        expected[p] = [e for e in archived(pdir, written) if not e.aborted]
    asyncio.run(offload(config, [PartitionDir(d) for d in sorted((tmp / "logs").iterdir())]))
    return config, expected


def plan(
    config: RlmmConfig,
    selection: RestoreSelection,
    *,
    store: bool = False,
    snapshots: SnapshotStore | None = None,
    resume: dict[int, int] | None = None,
) -> RestorePlan:
    options = config.remote_options()
    layout = remote_storage_for(options)
    if store:
        view, _ = store_metadata_view(layout, [selection.topic], snapshots)
    else:
        view = open_metadata_view(config)
    return build_plan(view, layout, options, selection, metadata_source="x", resume_from=resume)


def segment_rows(view: MetadataView) -> dict[Any, list[tuple[Any, ...]]]:
    """Each partition's lineage, as much of each segment as the store can say."""
    return {
        tp: [
            (
                m.remote_log_segment_id,
                m.start_offset,
                m.end_offset,
                m.max_timestamp_ms,
                m.segment_size_in_bytes,
                dict(m.segment_leader_epochs),
                m.txn_index_empty,
            )
            for m in view.lineage(tp)
        ]
        for tp in view.topic_partitions()
    }


def restored(p: RestorePlan) -> dict[int, list[tuple[Any, ...]]]:
    return {
        part.source.partition: [r for s in part.slices for r in rows(read_slice(s))]
        for part in p.partitions
    }


def want(expected: list[Expected], start: int = 0) -> list[tuple[Any, ...]]:
    return [
        (e.offset, e.key, e.value, tuple(e.headers), e.timestamp, 0)
        for e in expected
        if e.offset >= start
    ]


def test_the_store_alone_gives_the_metadatas_segments_and_plan(archive: Any) -> None:
    config, expected = archive
    layout = remote_storage_for(config.remote_options())
    from_store, listing = store_metadata_view(layout, [TOPIC])
    assert listing.skipped == [] and listing.from_snapshot == 0
    # The manager's own snapshot, written as it stopped, holds every copy: none of
    # their objects is read, and the view is the same.
    snapshots = open_snapshot_source(config)
    try:
        by_snapshot, snapshot_listing = store_metadata_view(layout, [TOPIC], snapshots)
        selection = RestoreSelection(TOPIC)
        c = plan(config, selection, store=True, snapshots=snapshots)
    finally:
        snapshots.close()
    assert snapshot_listing.from_snapshot == len(listing.segments) > 0
    assert snapshot_listing.snapshots and snapshot_listing.skipped == []
    with open_metadata_view(config) as view:
        assert from_store.topic_partitions() == view.topic_partitions()
        ours = segment_rows(view)
        assert segment_rows(from_store) == ours
        assert segment_rows(by_snapshot) == ours
        for tp in view.topic_partitions():
            assert len({e for r in ours[tp] for e in r[5]}) == 2  # two leader epochs
            assert any(not r[6] for r in ours[tp])  # aborted transactions
    a, b = plan(config, selection), plan(config, selection, store=True)
    assert a.to_dict() == {**b.to_dict(), "source": a.to_dict()["source"]}
    assert c.to_dict() == b.to_dict()
    got = restored(b)
    assert got == {p: want(e) for p, e in expected.items()}
    assert restored(c) == got
    assert b.source_partition_count == 2
    assert [len(p.slices) for p in b.partitions] == [len(p.slices) for p in a.partitions]


def _snapshot_of(view: MetadataView, keep: int) -> Snapshot:
    """A snapshot holding only the first ``keep`` copies of each partition: the rest
    were copied after it."""
    store = RemotePartitionMetadataStore()
    for tp in view.topic_partitions():
        for m in view.segments(tp)[:keep]:
            store.apply(dataclasses.replace(m, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED))
            store.apply(
                RemoteLogSegmentMetadataUpdate(
                    m.remote_log_segment_id, m.event_timestamp_ms, m.custom_metadata,
                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED, m.broker_id,
                )
            )  # fmt: skip
    return Snapshot(
        partition_count=view.partition_count,
        applied_offsets={0: 0},
        state=store.to_state(store.partitions()),
        created_ms=1,
    )


def test_a_snapshot_gives_the_copies_it_holds_the_objects_the_rest(
    archive: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A snapshot older than the newest copies: those it holds finished come from it
    (their objects unread), the others from their objects, and the view and plan are
    those of the objects alone. A truncated snapshot, or one whose frame checks but
    whose block of the topic does not decode, is named in a warning and the objects
    give everything."""
    config, _ = archive
    layout = remote_storage_for(config.remote_options())
    alone, listing = store_metadata_view(layout, [TOPIC])
    want_rows = segment_rows(alone)
    total = len(listing.segments)
    rebuilt: list[Any] = []
    rebuild = store_view._rebuild

    def counted(*args: Any) -> Any:
        rebuilt.append(args[1])
        return rebuild(*args)

    monkeypatch.setattr(store_view, "_rebuild", counted)
    with open_metadata_view(config) as view:
        older = _snapshot_of(view, keep=3)
    partial = LocalSnapshotStore(tmp_path / "partial")
    partial.write(older)
    view_of, got = store_metadata_view(layout, [TOPIC], partial)
    assert got.from_snapshot == 3 * 2 and len(rebuilt) == total - 3 * 2
    assert got.snapshots == [str(tmp_path / "partial" / "snapshot-00000000000000000001.rlmm")]
    assert segment_rows(view_of) == want_rows
    selection = RestoreSelection(TOPIC)
    assert (
        plan(config, selection, store=True, snapshots=partial).to_dict()
        == plan(config, selection, store=True).to_dict()
    )
    # Unreadable snapshots: each named, none an error, the objects read for every copy.
    whole = (config.snapshot_dir()).glob("snapshot-*.rlmm")
    data = max(whole).read_bytes()
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "snapshot-00000000000000000001.rlmm").write_bytes(data[: len(data) // 2])
    snap = decode_snapshot(data)
    bad_block = [[*entry[:3], b"\x00garbage", *entry[4:]] for entry in snap.state]
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "snapshot-00000000000000000001.rlmm").write_bytes(
        encode_snapshot(dataclasses.replace(snap, state=bad_block))
    )
    for where in (truncated, garbled):
        rebuilt.clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            view_of, got = store_metadata_view(layout, [TOPIC], LocalSnapshotStore(where))
        named = where / "snapshot-00000000000000000001.rlmm"
        assert any(str(named) in r.getMessage() for r in caplog.records), caplog.text
        assert got.from_snapshot == 0 and len(rebuilt) == total
        assert segment_rows(view_of) == want_rows


def test_bad_input_is_named(archive: Any) -> None:
    config, _ = archive
    with pytest.raises(UnknownSourceError, match=r"unknown topic 'nope'.*known: r"):
        plan(config, RestoreSelection("nope"))
    with pytest.raises(UnknownSourceError, match=r"partitions \[5\] of topic 'r'"):
        plan(config, RestoreSelection(TOPIC, partitions=(0, 5)))
    with pytest.raises(RangeOutsideArchiveError, match=r"r-0: offsets \[0, 999999\) are outside"):
        plan(config, RestoreSelection(TOPIC, partitions=(0,), to_offset=999_999))
    with pytest.raises(RangeOutsideArchiveError, match="outside the archive"):
        plan(config, RestoreSelection(TOPIC, from_offset=20, to_offset=10))
    with pytest.raises(RangeOutsideArchiveError, match="no record with a timestamp"):
        plan(config, RestoreSelection(TOPIC, from_timestamp_ms=4_000_000_000_000))
    with pytest.raises(RestoreInputError, match="not a legal Kafka topic name"):
        RestoreSelection(TOPIC, target_topic="a/b")
    with pytest.raises(RestoreInputError, match="not both"):
        RestoreSelection(TOPIC, from_offset=1, from_timestamp_ms=1)


def test_a_local_store_root_that_does_not_exist_is_named_with_its_key(
    archive: Any, tmp_path: Path
) -> None:
    """A wrong ``[remote] root`` said "unknown topic 'r': no object of it in
    LocalRemoteStorageManager(root=...) (known: none)" and created the directory
    (issue 46): now one line names the key and says the directory does not exist,
    from the store or the metadata alike, before the target is contacted (nothing
    listens on port 1), and nothing is created; a root that exists but holds no
    segment says so, naming the key too."""
    config, _ = archive
    nowhere = {"bootstrap_servers": "127.0.0.1:1"}
    wrong = tmp_path / "not-the-store"
    moved = dataclasses.replace(config, remote={**config.remote, "root": str(wrong)})
    for from_store in (True, False):
        with pytest.raises(UnknownSourceError) as info:
            restore_topics(moved, [RestoreSelection(TOPIC)], nowhere, from_store=from_store)
        message = str(info.value)
        assert message.startswith(f"[remote] root {str(wrong)!r} does not exist"), message
        assert "\n" not in message
        assert not wrong.exists()
    # unset: the default under data_dir is named as such
    unset = make_config(tmp_path / "elsewhere")
    with pytest.raises(UnknownSourceError) as info:
        restore_topics(unset, [RestoreSelection(TOPIC)], nowhere, from_store=True)
    default = str(tmp_path / "elsewhere" / "remote")
    assert f"[remote] root (unset: data_dir/remote, {default!r}) does not exist" in str(info.value)
    wrong.mkdir()
    with pytest.raises(UnknownSourceError) as info:
        restore_topics(moved, [RestoreSelection(TOPIC)], nowhere, from_store=True)
    assert "holds no segment of any topic" in str(info.value), info.value
    assert "[remote] root" in str(info.value), info.value


def test_two_selections_into_one_target_topic_are_refused_before_the_target_is_contacted(
    archive: Any,
) -> None:
    """A library call only (the CLI gives each source topic a target of its own): two
    selections of one topic's partitions into one target are refused, naming it, and
    before the target cluster is contacted (nothing listens on port 1: contacting it
    would be a TargetClusterError instead)."""
    config, _ = archive
    selections = [
        RestoreSelection(TOPIC, partitions=(0,), target_topic="joined"),
        RestoreSelection(TOPIC, partitions=(1,), target_topic="joined"),
    ]
    nowhere = {"bootstrap_servers": "127.0.0.1:1"}
    for from_store in (False, True):
        with pytest.raises(SharedTargetError) as info:
            restore_topics(config, selections, nowhere, from_store=from_store)
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith("target topic 'joined' would be written by two selections")
        assert "'r' partitions [0] and 'r' partitions [1]" in message
    # The same selection twice, into the source's name: refused the same way.
    with pytest.raises(SharedTargetError, match="target topic 'r' would be written by two"):
        restore_topics(config, [RestoreSelection(TOPIC)] * 2, nowhere, from_store=True)


def test_ranges_and_resume_points(archive: Any) -> None:
    config, expected = archive
    ts = expected[0][100].timestamp
    by_time = plan(config, RestoreSelection(TOPIC, partitions=(0,), from_timestamp_ms=ts))
    assert restored(by_time)[0] == want([e for e in expected[0] if e.timestamp >= ts])
    ranged = plan(config, RestoreSelection(TOPIC, partitions=(1,), from_offset=50, to_offset=300))
    assert restored(ranged)[1] == want([e for e in expected[1] if 50 <= e.offset < 300])
    whole = plan(config, RestoreSelection(TOPIC))
    # A resume point inside a transaction's range and inside a slice.
    resumed = plan(config, RestoreSelection(TOPIC), resume={0: 230, 1: 10**6})
    assert [(p.first_offset, p.end_offset) for p in resumed.partitions] == [
        (p.first_offset, p.end_offset) for p in whole.partitions
    ]
    got = restored(resumed)
    assert got[0] == want(expected[0], 230)
    assert got[1] == []
    assert resumed.partitions[0].start_offset == 230


def test_a_missing_copy_is_a_gap_that_stops_the_plan(archive: Any, tmp_path: Path) -> None:
    config, expected = archive
    layout = remote_storage_for(config.remote_options())
    with open_metadata_view(config) as view:
        tp = next(tp for tp in view.topic_partitions() if tp.partition == 0)
        victim = view.lineage(tp)[2]
    root = Path(config.remote_options()["root"])
    index = root / layout.index_object_name(victim, IndexType.OFFSET)
    moved = tmp_path / "moved.index"
    index.rename(moved)
    try:
        view, listing = store_metadata_view(layout, [TOPIC])
        assert len(listing.skipped) == 1 and "incomplete copy" in listing.skipped[0]
        options = config.remote_options()
        stopped = build_plan(
            view, layout, options, RestoreSelection(TOPIC, partitions=(0,)), metadata_source="store"
        )
        part = stopped.partitions[0]
        assert part.stop_gap is not None
        assert (part.stop_gap.first_offset, part.stop_gap.last_offset) == (
            victim.start_offset,
            victim.end_offset,
        )
        assert restored(stopped)[0] == want(
            [e for e in expected[0] if e.offset < victim.start_offset]
        )
        skipping = build_plan(
            view,
            layout,
            options,
            RestoreSelection(TOPIC, partitions=(0,), skip_missing=True),
            metadata_source="store",
        )
        assert skipping.partitions[0].stop_gap is None
        assert restored(skipping)[0] == want(
            [e for e in expected[0] if not victim.start_offset <= e.offset <= victim.end_offset]
        )
    finally:
        moved.rename(index)
