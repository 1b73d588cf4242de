"""The RemoteLayout contract (read side), run against every layout we can write here.

rlmm's own layout is written by its RemoteStorageManager; Kafka's LocalTieredStorage
layout is written file by file as Kafka's ``RemoteLogSegmentFileset.copy`` does (the
suite's Apache Kafka test checks it against the real plugin). Aiven's layout has its
own tests against objects its plugin wrote (test_aiven_s3.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote import IndexType, RemoteResourceNotFoundError
from remote.errors import InvalidRemotePathError
from remote.layouts import RemoteLayout
from remote.layouts.local_tiered_storage import ROOT_DIR_NAME
from remote.local import LocalRemoteStorageManager
from remote.registry import check_layout_matches, load_remote_layout
from rlmm.errors import ConfigError
from rlmm.model import RemoteLogSegmentMetadata, kafka_uuid_to_str
from tests.remote.conftest import SegmentFiles, finished, make_metadata, write_segment

LTS_SUFFIX = {
    "log_segment": ".log",
    "offset_index": ".index",
    "time_index": ".timeindex",
    "transaction_index": ".txnindex",
    "producer_snapshot_index": ".snapshot",
    "leader_epoch_index": ".leader_epoch_checkpoint",
}
FIELD_OF = {
    IndexType.OFFSET: "offset_index",
    IndexType.TIMESTAMP: "time_index",
    IndexType.PRODUCER_SNAPSHOT: "producer_snapshot_index",
    IndexType.TRANSACTION: "transaction_index",
    IndexType.LEADER_EPOCH: "leader_epoch_index",
}


@dataclass
class Case:
    name: str
    layout: RemoteLayout
    root: Path  # where the layout's names are rooted
    place: Callable[[RemoteLogSegmentMetadata, SegmentFiles], RemoteLogSegmentMetadata]


def _rlmm_case(tmp_path: Path) -> Case:
    rsm = LocalRemoteStorageManager(tmp_path / "remote")

    def place(m: RemoteLogSegmentMetadata, seg: SegmentFiles) -> RemoteLogSegmentMetadata:
        return finished(m, rsm.copy_log_segment_data(m, seg.data))

    layout = load_remote_layout({"type": "local", "root": str(tmp_path / "remote")})
    rsm_root = tmp_path / "remote"
    return Case("local", layout, rsm_root, place)


def place_lts(root: Path, m: RemoteLogSegmentMetadata, seg: SegmentFiles) -> None:
    """Kafka's RemoteLogSegmentFileset.copy: each file under its LocalTieredStorage name."""
    tp = m.topic_id_partition
    directory = root / ROOT_DIR_NAME / f"{tp.topic}-{tp.partition}-{kafka_uuid_to_str(tp.topic_id)}"
    directory.mkdir(parents=True, exist_ok=True)
    base = f"{m.start_offset:020d}-{kafka_uuid_to_str(m.remote_log_segment_id.id)}"
    for field_name, suffix in LTS_SUFFIX.items():
        if field_name in seg.contents:
            (directory / (base + suffix)).write_bytes(seg.contents[field_name])


def _lts_case(tmp_path: Path) -> Case:
    rsm_config_dir = tmp_path / "rsm"
    (rsm_config_dir / ROOT_DIR_NAME).mkdir(parents=True)

    def place(m: RemoteLogSegmentMetadata, seg: SegmentFiles) -> RemoteLogSegmentMetadata:
        place_lts(rsm_config_dir, m, seg)
        size = len(seg.contents["log_segment"])
        txn_empty = "transaction_index" not in seg.contents
        return finished(_sized(m, size, txn_empty), None)

    layout = load_remote_layout({"type": "local-tiered-storage", "dir": str(rsm_config_dir)})
    return Case("local-tiered-storage", layout, rsm_config_dir / ROOT_DIR_NAME, place)


def _sized(m: RemoteLogSegmentMetadata, size: int, txn_empty: bool) -> RemoteLogSegmentMetadata:
    import dataclasses

    return dataclasses.replace(m, segment_size_in_bytes=size, txn_index_empty=txn_empty)


@pytest.fixture(params=["local", "local-tiered-storage"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    built = _rlmm_case(tmp_path) if request.param == "local" else _lts_case(tmp_path)
    yield built
    built.layout.close()
    built.layout.close()  # idempotent


def test_fetch_ranges_and_every_index(case: Case, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "local")
    m = case.place(make_metadata(), seg)
    log = seg.contents["log_segment"]
    for start, end in [(0, None), (0, 0), (1000, 1999), (len(log) - 1, None), (5, 10**9)]:
        with case.layout.fetch_log_segment(m, start, end) as f:
            stop = len(log) if end is None else min(end + 1, len(log))
            assert f.read() == log[start:stop], (start, end)
    for kind, field_name in FIELD_OF.items():
        assert case.layout.fetch_index(m, kind) == seg.contents[field_name]


def test_absent_transaction_index_and_absent_segment(case: Case, tmp_path: Path) -> None:
    m = case.place(make_metadata(), write_segment(tmp_path / "l", with_txn=False))
    with pytest.raises(RemoteResourceNotFoundError, match="TRANSACTION"):
        case.layout.fetch_index(m, IndexType.TRANSACTION)
    ghost = make_metadata(start_offset=5000)
    with pytest.raises(
        RemoteResourceNotFoundError, match=kafka_uuid_to_str(ghost.remote_log_segment_id.id)
    ):
        case.layout.fetch_log_segment(ghost, 0)


def test_names_listing_and_parsing_agree(case: Case, tmp_path: Path) -> None:
    m = case.place(make_metadata(topic="orders.v2_x-y", partition=7), write_segment(tmp_path / "l"))
    other = case.place(make_metadata(partition=8), write_segment(tmp_path / "o", seed=1))
    objects = case.layout.segment_objects(m)
    listed = {o.name: o for o in case.layout.list_objects(m.topic_id_partition)}
    assert {o.name for o in objects} == set(listed)
    assert all(
        o.name.startswith(case.layout.partition_prefix(m.topic_id_partition)) for o in objects
    )
    assert sum(o.holds_log for o in objects) == 1
    log_object = next(o for o in objects if o.holds_log)
    assert log_object.name == case.layout.log_object_name(m)
    assert listed[log_object.name].size == len(
        write_segment(tmp_path / "x").contents["log_segment"]
    )
    for o in objects:
        parsed = case.layout.parse_object_name(o.name)
        assert parsed is not None and parsed.label == o.label
        assert (parsed.topic, parsed.partition, parsed.start_offset) == ("orders.v2_x-y", 7, 1000)
        assert parsed.segment_id == kafka_uuid_to_str(m.remote_log_segment_id.id)
    everything = [o.name for o in case.layout.list_objects()]
    assert set(everything) == set(listed) | {o.name for o in case.layout.segment_objects(other)}
    assert case.layout.parse_object_name("notes.txt") is None


def test_deletes_stay_inside_the_pattern(case: Case, tmp_path: Path) -> None:
    m = case.place(make_metadata(), write_segment(tmp_path / "l"))
    keep = case.place(make_metadata(start_offset=2000), write_segment(tmp_path / "k", seed=2))
    stray = case.root / "operator-notes.txt"
    stray.write_text("not tiered data")
    with pytest.raises(InvalidRemotePathError, match=r"operator-notes\.txt"):
        case.layout.delete_objects([case.layout.log_object_name(m), "operator-notes.txt"])
    assert stray.exists()
    assert case.layout.log_object_name(m) in {o.name for o in case.layout.list_objects()}
    case.layout.delete_segment_objects(m)
    case.layout.delete_segment_objects(m)  # idempotent
    left = {o.name for o in case.layout.list_objects()}
    assert left == {o.name for o in case.layout.segment_objects(keep)} | {"operator-notes.txt"}


def test_a_store_in_another_layout_is_named(tmp_path: Path) -> None:
    lts = _lts_case(tmp_path)
    m = lts.place(make_metadata(), write_segment(tmp_path / "l"))
    names = [o.name for o in lts.layout.list_objects()]
    # The same files seen through rlmm's layout: a one-line error naming one of them.
    ours = load_remote_layout({"type": "local", "root": str(lts.root)})
    with pytest.raises(
        ConfigError, match=r"leader_epoch_checkpoint is in the local-tiered-storage"
    ):
        check_layout_matches(ours, names)
    with pytest.raises(ConfigError, match="local-tiered-storage layout"):
        ours.fetch_index(m, IndexType.OFFSET)
    check_layout_matches(lts.layout, names)  # the right one: no error
    check_layout_matches(ours, [])  # an empty store proves nothing


def test_local_tiered_storage_dir_must_be_rsm_config_dir(tmp_path: Path) -> None:
    (tmp_path / "rsm" / ROOT_DIR_NAME).mkdir(parents=True)
    with pytest.raises(ConfigError, match=f"use its parent {tmp_path / 'rsm'}"):
        load_remote_layout(
            {"type": "local-tiered-storage", "dir": str(tmp_path / "rsm" / ROOT_DIR_NAME)}
        )
    with pytest.raises(ConfigError, match=r"rsm\.config\.dir"):
        load_remote_layout({"type": "local-tiered-storage", "dir": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match="takes one setting"):
        load_remote_layout(
            {"type": "local-tiered-storage", "dir": str(tmp_path / "rsm"), "root": "x"}
        )
    shutil.rmtree(tmp_path / "rsm")
