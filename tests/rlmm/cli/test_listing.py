"""`rlmm segments list|show`, `partitions` and `verify` on healthy stores, run as a user
runs them (a new process), with --json parsed and matched against the library's view."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from remote.manifest import SegmentManifest
from remote.naming import OBJECT_KINDS, object_name
from remote.segments import iter_records
from rlmm.archive import open_metadata_view
from rlmm.cli.units import human_age
from rlmm.ops.describe import segment_fields
from rlmm.ops.inventory import summarize_partitions
from tests.rlmm.cli.store import Store, build_store, run_cli, sid


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    endpoint = request.getfixturevalue("s3_endpoint") if request.param == "s3" else None
    return build_store(tmp_path, endpoint)


def test_listings_match_the_view(store: Store) -> None:
    with open_metadata_view(store.config) as view:
        want = [segment_fields(m) for tp in view.topic_partitions() for m in view.segments(tp)]
        want_partitions = [s.to_dict() for s in summarize_partitions(view)]
    copied = [segment_fields(m) for ms in store.segments.values() for m in ms]
    assert want == copied and len(want) >= 6
    tps = list(store.segments)

    listed = store.run("segments", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["segments"]
    # a plain history: each segment serves its whole range on the lineage
    served = [r.pop("serves") for r in rows]
    assert served == [{"first_offset": w["start_offset"], "last_offset": w["end_offset"]}
                      for w in want]  # fmt: skip
    assert rows == want

    only = store.run("segments", "list", "--partition", "1", "--epoch", "0", "--json")
    assert [s["partition"] for s in json.loads(only.stdout)["segments"]] == [1] * len(
        [m for m in store.segments[tps[1]] if 0 in m.segment_leader_epochs]
    )

    shown = store.run("partitions", "--json")
    assert shown.returncode == 0, shown.stderr
    partitions = json.loads(shown.stdout)["partitions"]
    # The age of each partition's newest archived record: its last segment's max
    # timestamp, to when the command ran (after the library's summary: the rest is equal).
    ran_at = time.time()
    for got, want_one, tp in zip(partitions, want_partitions, tps, strict=True):
        assert (got["topic"], got["partition"]) == (tp.topic, tp.partition)
        newest = max(store.segments[tp], key=lambda m: m.end_offset).max_timestamp_ms
        assert got["newest_record_timestamp_ms"] == newest > 0
        age, want_age = got.pop("newest_record_age_s"), want_one.pop("newest_record_age_s")
        assert want_age <= age <= ran_at - newest / 1000 + 0.001, (age, want_age)
    assert partitions == want_partitions
    first = partitions[0]
    n0 = len(store.segments[tps[0]])
    assert (first["topic"], first["partition"], first["segment_count"]) == ("orders", 0, n0)
    assert first["state_counts"] == {"COPY_SEGMENT_FINISHED": n0}
    assert first["start_offset"] == 0 and first["lineage_gaps"] == []
    assert set(first["highest_offset_per_epoch"]) == {"0", "2"}

    table = store.run("partitions")
    assert table.returncode == 0, table.stderr
    assert "newest_age" in table.stdout and "not archived" in table.stdout
    days = human_age(ran_at - partitions[0]["newest_record_timestamp_ms"] / 1000).split()[0]
    # the cell is "876d 3h", or "876d" alone on a whole hour, then last on its line
    cell = re.compile(rf" {re.escape(days)}( |$)", re.MULTILINE)
    assert days.endswith("d") and cell.search(table.stdout), table.stdout

    text = store.run("segments", "list")
    assert text.returncode == 0 and f"{len(want)} segments" in text.stdout
    assert all(s["segment_id"] in text.stdout for s in want)


def test_show_one_segment(store: Store) -> None:
    m = store.segments[next(iter(store.segments))][1]
    shown = store.run("segments", "show", sid(m), "--json")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["segment"] == segment_fields(m)
    manifest = SegmentManifest.of(m)
    assert manifest is not None
    # The smallest record timestamp the copy recorded (manifest version 2).
    assert manifest.smallest_timestamp_ms is not None
    assert detail["segment"]["smallest_timestamp_ms"] == manifest.smallest_timestamp_ms
    assert [o["name"] for o in detail["objects"]] == [
        object_name(m, k) for k in OBJECT_KINDS if k in manifest.objects
    ]
    for o, kind in zip(detail["objects"], manifest.objects, strict=True):
        assert o["stored_size"] == o["recorded_size"] == manifest.objects[kind].size
        assert o["recorded_crc32c"] == f"{manifest.objects[kind].crc32c:08x}"
    assert [(e["type"], e["state"]) for e in detail["events"]] == [
        ("RemoteLogSegmentMetadata", "COPY_SEGMENT_STARTED"),
        ("RemoteLogSegmentMetadataUpdate", "COPY_SEGMENT_FINISHED"),
    ]


def test_verify_is_clean_on_a_healthy_store(store: Store) -> None:
    quick = store.run("verify")
    assert quick.returncode == 0, quick.stdout + quick.stderr
    total = sum(len(ms) for ms in store.segments.values())
    assert f"{total} segments" in quick.stdout and "OK" in quick.stdout
    deep = store.run("verify", "--deep", "--json", "--safety-window", "0")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    report = json.loads(deep.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["segments_checked"] == total and report["bytes_read"] > 0


def test_records_come_from_remote_storage(store: Store) -> None:
    tp = next(iter(store.segments))
    local = [
        r
        for seg in store.pdirs[tp].segments()[:-1]
        for r in iter_records(seg.log_path)
        if not r.is_control
    ]
    got = store.run("records", "orders", "--partition", "0", "--from-offset", "5", "--limit", "7")
    assert got.returncode == 0, got.stderr
    rows = [json.loads(line) for line in got.stdout.splitlines()]
    want = [r for r in local if r.offset >= 5][:7]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (r.offset, r.key.decode(), r.value.decode()) for r in want if r.key and r.value
    ]
    assert all(r["topic"] == "orders" and r["partition"] == 0 for r in rows)
    raw = run_cli(
        "records",
        "orders",
        "--partition",
        "1",
        "--format",
        "raw",
        "--config",
        str(store.config_path),
    )
    assert raw.returncode == 0, raw.stderr
    tp1 = list(store.segments)[1]
    copied = [r for seg in store.pdirs[tp1].segments()[:-1] for r in iter_records(seg.log_path)]
    assert raw.stdout.splitlines() == [r.value.decode() for r in copied if r.value]
    unknown = store.run("records", "nope")
    assert unknown.returncode == 2 and "unknown topic 'nope'" in unknown.stderr
