"""`rlmm verify` finds each seeded problem and nothing else; `rlmm gc --apply` repairs
exactly the garbage, after which a second verify shows only what needs an operator
(local store) or nothing at all (S3 store). Run as a user runs them (new processes)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote.naming import object_name
from remote.segments.batch import RecordBatchReader
from remote.storage import IndexType
from rlmm.archive import open_metadata_view
from rlmm.model import RemoteLogSegmentState as S
from tests.rlmm.cli.store import (
    ROOT,
    build_store,
    open_stale_upload,
    read,
    rewrite,
    seed_orphan,
    sid,
    started_copies,
    stuck_deleting,
    stuck_started,
)


def problems(result: Any) -> set[tuple[Any, ...]]:
    report = json.loads(result.stdout)
    assert report["ok"] is (not report["problems"])
    return {(p["kind"], p.get("segment_id"), p.get("object_name")) for p in report["problems"]}


def test_verify_and_gc_on_a_damaged_local_store(tmp_path: Path) -> None:
    store = build_store(tmp_path, skip=(2,))  # orders-0's third rolled segment never copied
    tp0 = next(iter(store.segments))
    s = store.segments[tp0]
    rsm = store.rsm()
    try:
        deleted = object_name(s[0], IndexType.OFFSET)
        rsm.delete_objects([deleted])
        truncated = object_name(s[1], IndexType.TIMESTAMP)
        rewrite(store, rsm, truncated, read(rsm, truncated)[:-7])
        flipped_log = object_name(s[2], None)
        data = bytearray(read(rsm, flipped_log))
        second_batch = list(RecordBatchReader(bytes(data)))[1].position
        data[second_batch + 40] ^= 0x5A  # inside the CRC-covered header of batch 2
        rewrite(store, rsm, flipped_log, bytes(data))
        flipped_snapshot = object_name(s[3], IndexType.PRODUCER_SNAPSHOT)
        snap = bytearray(read(rsm, flipped_snapshot))
        snap[len(snap) // 2] ^= 0x01
        rewrite(store, rsm, flipped_snapshot, bytes(snap))
        orphans = set(seed_orphan(store, rsm))
        fresh = seed_orphan(store, rsm, age_ms=0)  # inside the safety window: not garbage yet
    finally:
        rsm.close()
    started = stuck_started(store)
    deleting = stuck_deleting(store)
    gap = s[1].end_offset + 1

    data_problems = {
        ("missing_object", sid(s[0]), deleted),
        ("size_mismatch", sid(s[1]), truncated),
        ("lineage_gap", None, None),
    }
    deep_only = {
        ("checksum_mismatch", sid(s[2]), flipped_log),
        ("batch_crc_error", sid(s[2]), flipped_log),
        ("checksum_mismatch", sid(s[3]), flipped_snapshot),
    }
    garbage = orphans | {
        ("stuck_copy_started", sid(started), None),
        ("stuck_delete_started", sid(deleting), None),
    }
    quick = store.run("verify", "--json")
    assert quick.returncode == 1, quick.stderr
    assert problems(quick) == data_problems | garbage
    gaps = [p for p in json.loads(quick.stdout)["problems"] if p["kind"] == "lineage_gap"]
    assert [(g["topic"], g["partition"], g["first_offset"]) for g in gaps] == [("orders", 0, gap)]

    deep = store.run("verify", "--deep", "--json")
    assert deep.returncode == 1
    assert problems(deep) == data_problems | deep_only | garbage

    dry = store.run("gc")
    assert dry.returncode == 1 and "dry run" in dry.stdout
    # The problems gc leaves for an operator each come with their remedy.
    assert "  missing_object: restore the object" in dry.stdout
    text = store.run("verify")
    assert "  orphan_object: garbage: rlmm gc --apply deletes it" in text.stdout
    assert problems(store.run("verify", "--json")) == data_problems | garbage  # nothing changed

    applied = store.run("gc", "--apply", "--json")
    assert applied.returncode == 1, applied.stdout + applied.stderr  # data problems remain
    plan = json.loads(applied.stdout)
    assert len(plan["done"]) == len(garbage) and plan["skipped"] == []
    assert {p["kind"] for p in plan["left_alone"]} == {k for k, _, _ in data_problems}

    again = store.run("verify", "--deep", "--json")
    assert problems(again) == data_problems | deep_only  # only what needs an operator
    listed = json.loads(store.run("segments", "list", "--json").stdout)["segments"]
    assert {sid(started), sid(deleting)}.isdisjoint({x["segment_id"] for x in listed})
    rsm = store.rsm()
    try:
        names = {o.name for o in rsm.list_objects()}
    finally:
        rsm.close()
    assert not any(sid(started) in n or sid(deleting) in n for n in names)
    assert not {n for _, _, n in orphans} & names
    assert {n for _, _, n in fresh} <= names  # young objects are never touched
    history = json.loads(
        store.run("segments", "list", "--json", "--state", "COPY_SEGMENT_STARTED").stdout
    )
    assert history == {"segments": []}


@pytest.mark.s3
def test_gc_repairs_garbage_on_s3_and_verify_is_clean(tmp_path: Path, s3_endpoint: str) -> None:
    store = build_store(tmp_path, s3_endpoint)
    rsm = store.rsm()
    try:
        orphans = set(seed_orphan(store, rsm))
        victim = store.segments[next(iter(store.segments))][0]
        upload_name, upload_id = open_stale_upload(rsm, victim)
    finally:
        rsm.close()
    started = stuck_started(store)
    deleting = stuck_deleting(store)
    garbage = orphans | {
        ("stuck_copy_started", sid(started), None),
        ("stuck_delete_started", sid(deleting), None),
        ("stale_multipart_upload", sid(victim), upload_name),
    }
    window = ("--safety-window", "0s")  # moto stamps objects "now": no ageing them
    found = store.run("verify", "--json", *window)
    assert found.returncode == 1, found.stderr
    assert problems(found) == garbage
    upload = next(p for p in json.loads(found.stdout)["problems"] if p.get("upload_id"))
    assert upload["upload_id"] == upload_id

    dry = store.run("gc", "--json", *window)
    assert dry.returncode == 1
    assert json.loads(dry.stdout)["applied"] is False
    assert problems(store.run("verify", "--json", *window)) == garbage

    applied = store.run("gc", "--apply", *window)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    clean = store.run("verify", "--deep", "--json", *window)
    assert clean.returncode == 0, clean.stdout
    assert json.loads(clean.stdout)["problems"] == []


def test_gc_apply_next_to_a_running_writer(tmp_path: Path) -> None:
    """Read-only commands work beside a process holding the file log's writer lock;
    gc --apply, which must write the DELETE events, and a second sidecar stop with one
    line naming it and saying what to do, in a command-line user's terms (not the
    library's `read_only=True`)."""
    store = build_store(tmp_path)
    started = stuck_started(store)
    with subprocess.Popen(
        [sys.executable, "-m", "tests.rlmm.archive._writer_child", str(store.config.data_dir)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as writer:  # fmt: skip
        try:
            assert writer.stdout is not None and writer.stdin is not None
            assert writer.stdout.readline().strip() == "ready"
            listed = store.run("segments", "list", "--topic", "orders", "--json")
            assert listed.returncode == 0, listed.stderr
            assert sid(started) in {s["segment_id"] for s in json.loads(listed.stdout)["segments"]}
            blocked = store.run("gc", "--apply", "--topic", "orders")
            assert blocked.returncode == 2, blocked.stdout + blocked.stderr
            assert "Traceback" not in blocked.stderr
            (line,) = blocked.stderr.strip().splitlines()
            assert f"another process (pid {writer.pid}) writes the metadata log" in line
            assert "Stop that process first" in line and "read_only" not in line
            logs = next(iter(store.pdirs.values())).path.parent
            second = store.run("offload", "--once", "--log-dir", str(logs))
            assert second.returncode == 2, second.stdout + second.stderr
            # the sidecar's error line carries the time, as its log lines do
            (line,) = [x for x in second.stderr.splitlines() if " error: " in x]
            assert f"another process (pid {writer.pid}) writes the metadata log" in line
            assert "a second `rlmm offload` must not run on the same data_dir" in line
            assert "read_only" not in second.stderr
            as_json = store.run("gc", "--apply", "--topic", "orders", "--json")
            assert json.loads(as_json.stdout)["error"]["type"] == "EventLogLockedError"
        finally:
            if writer.stdin is not None:
                writer.stdin.close()
            writer.wait(timeout=60)
    still = store.run("verify", "--topic", "orders", "--json")
    assert problems(still) == {("stuck_copy_started", sid(started), None)}


def test_gc_killed_mid_repair_is_finished_by_the_next_gc(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    stuck = [sid(m) for m in started_copies(store, count=60)]
    gc = subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", "gc", "--apply", "--config", str(store.config_path)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    root = Path(store.config.remote_options()["root"])
    try:
        # Watched in the store's directory, not by replaying the metadata: a replay on a
        # loaded machine is slower than gc, which then finished before the kill.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            names = " ".join(p.name for p in root.rglob("*"))
            if sum(s not in names for s in stuck) >= 5:
                break  # some segments' objects deleted: gc is mid-way
            time.sleep(0.005)
        gc.send_signal(signal.SIGKILL)
    finally:
        gc.wait(timeout=30)
    with open_metadata_view(store.config) as view:
        states = {sid(m): m.state for tp in view.topic_partitions() for m in view.segments(tp)}
    left = [s for s in stuck if s in states]
    assert 0 < len(left) < len(stuck), "gc was not killed mid-way"
    assert {states[s] for s in left} <= {S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED}
    rsm = store.rsm()
    try:
        names = {o.name for o in rsm.list_objects()}
    finally:
        rsm.close()
    for s in stuck:
        if s not in states:  # DELETE_SEGMENT_FINISHED only after its objects were deleted
            assert not any(s in n for n in names)
        elif states[s] == S.COPY_SEGMENT_STARTED:  # untouched
            assert sum(s in n for n in names) == 5
    # A later gc finishes the job (DELETE_SEGMENT_STARTED is new: past a zero window).
    again = store.run("gc", "--apply", "--safety-window", "0s")
    assert again.returncode == 0, again.stdout + again.stderr
    clean = store.run("verify", "--deep", "--json", "--safety-window", "0s")
    assert json.loads(clean.stdout)["problems"] == []
    listed = json.loads(store.run("segments", "list", "--json").stdout)["segments"]
    assert not {x["segment_id"] for x in listed} & set(stuck)


def test_gc_leaves_a_stuck_segment_rlmm_did_not_write_to_its_writer(tmp_path: Path) -> None:
    """A copy a broker's own RemoteLogManager has in flight in the shared metadata
    (COPY_SEGMENT_STARTED two hours ago, a random id, no object in rlmm's store): gc
    plans nothing for it, says why, and exits 1; rlmm's own stuck copy is still fenced."""
    import asyncio

    from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata
    from tests.rlmm.cli.store import HOUR_MS, with_manager

    store = build_store(tmp_path)
    ours = stuck_started(store)
    tp = ours.topic_id_partition

    async def publish(manager: Any, _rsm: Any) -> RemoteLogSegmentMetadata:
        theirs = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp), 10_000, 10_999, 1_700_000_000_000, 3,
            int(time.time() * 1000) - 2 * HOUR_MS, 1_000_000, {5: 10_000},
        )  # fmt: skip
        await manager.add_remote_log_segment_metadata(theirs)
        return theirs

    theirs = asyncio.run(with_manager(store.config, [tp], publish))
    dry = store.run("gc", "--json")
    plan = json.loads(dry.stdout)
    assert [a["segment_id"] for a in plan["actions"]] == [sid(ours)]
    assert [p["segment_id"] for p in plan["not_ours"]] == [sid(theirs)]
    assert "not written by rlmm" in plan["not_ours"][0]["reason"]
    applied = store.run("gc", "--apply")
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert f"left alone {sid(theirs)} (stuck_copy_started): not written by rlmm" in applied.stdout
    assert problems(store.run("verify", "--json")) == {("stuck_copy_started", sid(theirs), None)}
