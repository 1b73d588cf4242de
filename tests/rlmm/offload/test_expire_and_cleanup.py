"""Expiration, crash cleanup, partition deletion and cancellation of the RemoteLogManager."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remote import LogSegmentData
from remote.local import LocalRemoteStorageManager
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteState,
)
from rlmm.offload import RemoteLogManager, RetentionSettings
from tests.rlmm.offload.conftest import (
    KEEP_ALL,
    S,
    check_invariants,
    local_keys,
    source,
    write_partition,
)


class GatedRsm(LocalRemoteStorageManager):
    """The real local RSM whose copies wait for ``gate`` (holds a copy mid-upload)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment_data: LogSegmentData,
        *,
        cancelled: threading.Event | None = None,
    ) -> bytes | None:
        self.entered.set()
        assert self.gate.wait(30), "gate never opened"
        return super().copy_log_segment_data(metadata, segment_data, cancelled=cancelled)


async def test_retention_ms_deletes_old_segments(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    # generated timestamps are 1_700_000_000_000 + offset: keep offsets >= 400 at ``now``
    now = 1_700_000_000_000 + 400 + 3_600_000
    clock = [1_700_000_000_000]  # copied while nothing is expired yet
    src = source(pdir, RetentionSettings(retention_ms=3_600_000, retention_bytes=-1))
    rlm = make_rlm(clock_ms=lambda: clock[0])
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    copied = (await rlm.copy_round(tp)).copied
    clock[0] = now
    result = await rlm.expire_round(tp)
    expected = [m.start_offset for m in copied if m.max_timestamp_ms <= 1_700_000_000_400]
    assert expected and len(expected) < len(copied)
    assert [v.segment.start_offset for v in result.deleted] == expected
    assert {v.reason for v in result.deleted} == {"retention.ms"}
    live = check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))
    assert [m.start_offset for m in live] == [m.start_offset for m in copied][len(expected) :]


async def test_segments_past_retention_are_not_uploaded(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A round does not upload what its own expiration would delete at once (it used to
    copy and then delete them): the leading segments past retention.ms are skipped, each
    logged with its offsets (what they are is expired, not lost: bench/soak.py counts
    them so)."""
    caplog.set_level(logging.INFO, logger="rlmm.offload")
    pdir = write_partition(tmp_path, "orders", 0)
    now = 1_700_000_000_000 + 400 + 3_600_000
    src = source(pdir, RetentionSettings(retention_ms=3_600_000, retention_bytes=-1))
    rlm = make_rlm(clock_ms=lambda: now)
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    result = await rlm.copy_round(tp)
    rolled = pdir.segments()[:-1]
    assert result.skipped_expired > 0 and result.error is None
    assert result.skipped_expired + len(result.copied) == len(rolled)
    assert all(m.max_timestamp_ms > 1_700_000_000_400 for m in result.copied)
    assert (await rlm.expire_round(tp)).deleted == []  # nothing left to delete at once
    live = check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))
    assert [m.start_offset for m in live] == [m.start_offset for m in result.copied]
    skipped = [seg.base_offset for seg in rolled[: result.skipped_expired]]
    keys = list(local_keys(rsm.root))
    assert keys and not [k for k in keys for b in skipped if f"/{b:020d}-" in k]  # not uploaded
    said = [r.getMessage() for r in caplog.records if "past retention.ms already" in r.getMessage()]
    assert [m.split("(offsets ")[1].split(")")[0] for m in said] == [
        f"{seg.base_offset}..{seg.next_base_offset - 1}" for seg in rolled[: result.skipped_expired]
    ]


async def test_retention_bytes_counts_local_and_remote(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    segs = pdir.segments()
    total = sum(s.size_in_bytes for s in segs)
    keep = total - segs[0].size_in_bytes - segs[1].size_in_bytes  # two must go
    src = source(pdir, RetentionSettings(retention_ms=-1, retention_bytes=keep))
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    await rlm.copy_round(tp)
    result = await rlm.expire_round(tp)
    assert [v.segment.start_offset for v in result.deleted] == [0, segs[1].base_offset]
    assert {v.reason for v in result.deleted} == {"retention.bytes"}
    assert (await rlm.expire_round(tp)).deleted == []
    check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))


async def test_log_start_offset_deletes_below_it(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    segs = pdir.segments()
    src = source(pdir, KEEP_ALL, log_start_offset=segs[2].base_offset)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    copied = (await rlm.copy_round(tp)).copied
    # copies start at the log start offset: nothing below it is copied at all
    assert copied[0].start_offset == segs[2].base_offset


async def test_crash_cleanup_deletes_leftovers_on_becoming_leader(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir)
    tp = src.topic_id_partition
    await rlmm_manager.on_partition_leadership_changes([tp], [])
    await rlmm_manager.wait_until_ready([tp], 10)
    leftovers = []
    for seg, state in zip(
        pdir.segments()[:2], (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED), strict=True
    ):
        # an earlier attempt: STARTED published, objects uploaded, then the process died
        from remote.segment_data import log_segment_data

        summary = seg.summary()
        m = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            summary.base_offset,
            summary.end_offset,
            summary.max_timestamp_ms,
            7,
            1,
            summary.size_in_bytes,
            summary.segment_leader_epochs,
        )
        await rlmm_manager.add_remote_log_segment_metadata(m)
        custom = rsm.copy_log_segment_data(m, log_segment_data(seg, summary))
        if state == S.DELETE_SEGMENT_STARTED:
            for s in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED):
                await rlmm_manager.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 2, custom, s, 7)
                )
        leftovers.append(m)
    assert len(local_keys(rsm.root)) >= 10
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    assert rlmm_manager.list_remote_log_segments(tp) == []
    assert local_keys(rsm.root) == []
    copied = (await rlm.copy_round(tp)).copied
    assert copied[0].start_offset == 0  # the leftover copy did not count as copied
    check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))


async def test_delete_partition(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir)
    tp = src.topic_id_partition
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    copied = (await rlm.copy_round(tp)).copied
    assert await rlm.delete_partition(tp) == len(copied)
    assert local_keys(rsm.root) == []
    state = rlmm_manager.remote_partition_delete_state(tp)
    assert state is not None and state.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert await rlm.delete_partition(tp) == 0  # idempotent


async def test_cancelled_copy_cleans_up_after_the_upload(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    gated = GatedRsm(tmp_path / "gated")
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir)
    tp = src.topic_id_partition
    rlm = make_rlm(store=gated)
    await rlm.on_leadership_changes([src], start_tasks=False)
    task = asyncio.create_task(rlm.copy_round(tp))
    assert await asyncio.to_thread(gated.entered.wait, 10)
    task.cancel()
    threading.Timer(0.2, gated.gate.set).start()  # the upload finishes after the cancel
    t0 = time.monotonic()
    try:
        await task
        raise AssertionError("cancellation was swallowed")
    except asyncio.CancelledError:
        pass
    assert time.monotonic() - t0 >= 0.15  # it waited for the thread instead of leaking it
    assert rlmm_manager.list_remote_log_segments(tp) == []
    assert local_keys(gated.root) == []
    gated.close()


async def test_leader_change_mid_copy_supersedes(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """Broker A (epoch 0) is mid-upload when B (epoch 1, other segment boundaries) takes over."""
    import uuid

    from remote.segments import PartitionDirWriter, generate_records, iter_records

    topic_id = uuid.uuid4()
    a_dir = write_partition(
        tmp_path / "a",
        "orders",
        0,
        topic_id=topic_id,
        epochs=(0,),
        records=600,
        aborted_txn=False,
        segment_bytes=12 * 1024,
    )
    with PartitionDirWriter(
        tmp_path / "b", "orders", 0, topic_id=topic_id, segment_bytes=32 * 1024
    ) as w:
        w.append_records(generate_records(600, value_size=40), batch_records=10)
        w.set_leader_epoch(1)
        w.append_records(generate_records(900, start=600, value_size=40), batch_records=10)
    from remote.segments import PartitionDir

    b_dir = PartitionDir(tmp_path / "b" / "orders-0")
    gated = GatedRsm(tmp_path / "remote-shared")
    tp = a_dir.topic_id_partition()
    a = make_rlm(store=gated)
    # A's first round stops at a high watermark; its second one is held mid-upload.
    await a.on_leadership_changes(
        [source(a_dir, high_watermark=a_dir.segments()[2].base_offset)], start_tasks=False
    )
    gated.gate.set()
    first = (await a.copy_round(tp)).copied
    assert len(first) == 2
    gated.gate.clear()
    gated.entered.clear()
    await a.on_leadership_changes([source(a_dir)], start_tasks=False)
    a_round = asyncio.create_task(a.copy_round(tp))
    assert await asyncio.to_thread(gated.entered.wait, 10)
    # no grace: B cleans A's STARTED at once (a grace lets A finish first; see
    # test_leadership's hole test for what that prevents)
    b = make_rlm(store=gated, broker_id=1, leftover_grace_s=0)
    await b.on_leadership_changes([source(b_dir)], start_tasks=False)  # cleans A's STARTED
    b_task = asyncio.create_task(b.copy_round(tp))
    await asyncio.sleep(0.1)
    gated.gate.set()
    a_result = await a_round
    await b_task
    expired = await b.expire_round(tp)
    # B's first segment overlaps A's copies: those are superseded, and deleted
    assert [v.reason for v in expired.deleted] and {v.reason for v in expired.deleted} == {
        "superseded"
    }
    assert a_result.error is not None  # A's FINISHED was refused: its attempt was deleted
    check_invariants(rlmm_manager, gated, [b_dir], local_keys(gated.root))
    segs = rlmm_manager.list_remote_log_segments(tp)
    assert all(m.state == S.COPY_SEGMENT_FINISHED for m in segs)
    # the lineage as a reader walks it: every offset once, in order, to B's copied end
    offset, seen = 0, list[int]()
    while True:
        epoch = 1 if offset >= 600 else 0
        m = rlmm_manager.remote_log_segment_metadata(tp, epoch, offset)
        if m is None:
            break
        with gated.fetch_log_segment(m, 0) as stream:
            offsets = [
                r.offset for r in iter_records(stream.read(), name="remote") if r.offset >= offset
            ]
        seen.extend(o for o in offsets if o <= m.end_offset)
        offset = m.end_offset + 1
    assert seen == list(range(len(seen)))
    assert seen[-1] == b.highest_remote_offset(tp) == b_dir.segments()[-1].base_offset - 1
    keys = local_keys(gated.root)
    from rlmm.model import kafka_uuid_to_str
    from tests.rlmm.offload.conftest import segment_ids_of_keys

    assert segment_ids_of_keys(keys) == {
        kafka_uuid_to_str(m.remote_log_segment_id.id) for m in segs
    }
    gated.close()
