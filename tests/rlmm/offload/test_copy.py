"""RemoteLogManager copy rounds on real partition dirs, the file event log and the local RSM."""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remote import SegmentManifest, segment_data
from remote.local import LocalRemoteStorageManager
from remote.segments import (
    PartitionDir,
    PartitionDirWriter,
    ProducerRecord,
    RecordBatchReader,
    available_codecs,
    decode_batch,
    generate_records,
)
from rlmm.errors import RemoteResourceNotFoundError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.offload import RemoteLogManager, RetentionSettings
from rlmm.offload.errors import LogDirError
from rlmm.offload.logdir import SNAPSHOT_WRITE_S
from tests.rlmm.offload.conftest import (
    S,
    check_invariants,
    local_keys,
    source,
    write_partition,
)

CODECS = [c for c in ("none", "gzip", "snappy", "lz4", "zstd") if c in available_codecs()]


@pytest.mark.parametrize("codec", CODECS)
async def test_copy_round_copies_every_rolled_segment(
    tmp_path: Path,
    codec: str,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path / "logs", "orders", 0, codec=codec, epochs=(0, 3, 5))
    src = source(pdir)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    assert rlm.highest_remote_offset(tp) == -1
    result = await rlm.copy_round(tp)
    rolled = pdir.segments()[:-1]
    assert len(rolled) >= 3
    assert [m.start_offset for m in result.copied] == [s.base_offset for s in rolled]
    assert result.error is None and result.pending == 0
    live = check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))
    assert len(live) == len(rolled)
    # the epochs of the lineage, the aborted transaction, the highest offset
    assert {e for m in live for e in m.segment_leader_epochs} == {0, 3, 5}
    assert any(not m.txn_index_empty for m in live)
    assert rlm.highest_remote_offset(tp) == pdir.segments()[-1].base_offset - 1
    assert (await rlm.copy_round(tp)).copied == []  # nothing new: nothing copied twice
    data = await rlm.fetch_log_segment(live[1], 10, 109)
    assert data == rolled[1].log_path.read_bytes()[10:110]
    assert rlm.metrics.fetch_bytes.labels("orders")._value.get() == 100
    assert rlm.metrics.copy_lag_segments.labels("orders", "0")._value.get() == 0
    assert rlm.metrics.copy_bytes.labels("orders")._value.get() == sum(
        s.size_in_bytes for s in rolled
    )


async def test_open_transaction_holds_back_copies(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    with PartitionDirWriter(tmp_path, "payments", 0, segment_bytes=8 * 1024) as w:
        w.append_records(generate_records(200, value_size=40), batch_records=10)
        first_open = w.log_end_offset
        w.append_records(
            generate_records(3, start=200), producer_id=9, producer_epoch=0, transactional=True
        )
        w.append_records(generate_records(600, start=203, value_size=40), batch_records=10)
    from remote.segments import PartitionDir

    pdir = PartitionDir(tmp_path / "payments-0")
    src = source(pdir)
    assert src.last_stable_offset() == first_open
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    result = await rlm.copy_round(src.topic_id_partition)
    assert result.copied
    assert all(m.end_offset < first_open for m in result.copied)
    held = [
        s for s in pdir.segments()[:-1] if s.next_base_offset and s.next_base_offset > first_open
    ]
    assert held, "the test needs rolled segments past the open transaction"


async def test_a_snapshot_the_broker_is_still_writing_holds_back_the_segment_it_ends(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka creates a producer snapshot, then writes it: a sidecar that lists the
    partition in between (the CI's three-node test did) finds it empty. That segment
    waits a round; the ones before are copied; nothing is logged as an error."""
    pdir = write_partition(tmp_path, "orders", 0)
    rolled = pdir.segments()[:-1]
    for offset, path in pdir.producer_snapshots().items():
        if offset > rolled[-1].next_base_offset:
            path.unlink()  # the writer's shutdown snapshot: the broker is still running
    newest_offset, newest = next(reversed(pdir.producer_snapshots().items()))
    assert newest_offset == rolled[-1].next_base_offset
    written = newest.read_bytes()
    newest.write_bytes(b"")  # as Kafka leaves it between open(CREATE) and write
    settled = time.time() - 10  # every file settled: a change token is given
    for path in [pdir.path, *pdir.path.iterdir()]:
        os.utime(path, (settled, settled))
    src = source(pdir)
    assert src.change_token() is not None
    assert src.last_stable_offset() == rolled[-1].base_offset
    # Kafka's write into the file changes no mtime the token holds: none is given until
    # the snapshot is read, or a round found idle would keep the segment held back.
    assert src.change_token() is None
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    with caplog.at_level(logging.WARNING):
        first = await rlm.copy_round(tp)
    assert first.error is None and not caplog.records
    assert [m.start_offset for m in first.copied] == [s.base_offset for s in rolled[:-1]]
    newest.write_bytes(written)  # the broker's write lands
    second = await rlm.copy_round(tp)
    assert [m.start_offset for m in second.copied] == [rolled[-1].base_offset]
    assert src.change_token() is not None
    check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))


async def test_a_snapshot_torn_long_ago_fails_the_round_naming_it(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    newest = next(reversed(pdir.producer_snapshots().values()))
    newest.write_bytes(newest.read_bytes()[:7])
    old = time.time() - 2 * SNAPSHOT_WRITE_S
    os.utime(newest, (old, old))
    with pytest.raises(LogDirError, match=re.escape(str(newest))):
        source(pdir).last_stable_offset()


async def test_a_torn_snapshot_of_a_stable_segment_is_never_uploaded(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    first = pdir.segments()[0]
    torn = pdir.producer_snapshots()[first.next_base_offset]
    torn.write_bytes(b"")
    src = source(pdir)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    result = await rlm.copy_round(src.topic_id_partition)
    assert result.copied == [] and result.error is not None
    assert str(torn) in str(result.error)
    assert rlmm_manager.list_remote_log_segments(src.topic_id_partition) == []


async def test_a_new_leader_publishes_the_remote_size_before_its_first_round(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """A sidecar restarted over a backlog: the size of what is already remote is on
    /metrics from the start, not only after the first round's copies."""
    pdir = write_partition(tmp_path, "orders", 0)
    src = source(pdir)
    first = make_rlm()
    await first.on_leadership_changes([src], start_tasks=False)
    copied = (await first.copy_round(src.topic_id_partition)).copied
    assert copied
    await first.close()
    later = make_rlm()
    await later.on_leadership_changes([source(pdir)], start_tasks=False)
    size = later.metrics.remote_log_size.labels("orders", "0")._value.get()
    count = later.metrics.metadata_count.labels("orders", "0")._value.get()
    assert size == sum(m.segment_size_in_bytes for m in copied)
    assert count == len(copied)


async def test_high_watermark_bounds_copies(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = write_partition(tmp_path, "orders", 1)
    segs = pdir.segments()
    hw = segs[2].base_offset
    src = source(pdir, high_watermark=hw)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    result = await rlm.copy_round(src.topic_id_partition)
    assert [m.start_offset for m in result.copied] == [segs[0].base_offset, segs[1].base_offset]


async def test_not_a_leader_is_refused(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    rlm = make_rlm()
    await rlm.on_leadership_changes([], [pdir.topic_id_partition()], start_tasks=False)
    with pytest.raises(RemoteResourceNotFoundError, match="orders-0"):
        await rlm.copy_round(pdir.topic_id_partition())


async def test_task_copies_and_close_stops_it(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    import asyncio

    pdir = write_partition(tmp_path, "orders", 0)
    rlm = make_rlm(task_interval_s=0.05)
    await rlm.on_leadership_changes([source(pdir)])
    tp = pdir.topic_id_partition()
    for _ in range(200):
        listed = rlmm_manager.list_remote_log_segments(tp)
        if sum(m.state == S.COPY_SEGMENT_FINISHED for m in listed) == len(pdir.segments()) - 1:
            break
        await asyncio.sleep(0.02)
    await rlm.close()
    await rlm.close()  # idempotent
    live = check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))
    assert len(live) == len(pdir.segments()) - 1
    assert all(m.state == S.COPY_SEGMENT_FINISHED for m in live)


async def test_becoming_follower_stops_the_task(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = write_partition(tmp_path, "orders", 0)
    tp = pdir.topic_id_partition()
    rlm = make_rlm(task_interval_s=3600)
    await rlm.on_leadership_changes([source(pdir)])
    assert rlm.leaders == [tp]
    await rlm.on_leadership_changes([], [tp])
    assert rlm.leaders == []
    with pytest.raises(RemoteResourceNotFoundError, match="not led"):
        rlm.highest_remote_offset(tp)
    await rlm.stop_partitions([tp])
    assert tp not in rlm.manager.assigned_partitions


async def test_each_copy_records_its_segments_smallest_timestamp_from_the_crc_pass(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out-of-order timestamps (negative deltas in a batch, late records): the manifest
    holds each segment's true minimum, which the CRC check's pass over the batches
    found (the RSM's own scan of the file, for callers that did not, is not used)."""
    rng = random.Random(29)
    records = [
        ProducerRecord(
            b"%d" % n, b"v" * 30, (), 1_700_000_000_000 + n * 1000 - rng.randrange(600_000)
        )
        for n in range(900)
    ]
    with PartitionDirWriter(tmp_path / "logs", "orders", 0, segment_bytes=16 * 1024) as w:
        w.append_records(records, batch_records=10)
    pdir = PartitionDir(tmp_path / "logs" / "orders-0")

    def no_second_pass(*args: object, **kwargs: object) -> None:
        raise AssertionError("the RSM scanned the log again")

    monkeypatch.setattr(segment_data, "RecordBatchReader", no_second_pass)
    src = source(pdir)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    result = await rlm.copy_round(src.topic_id_partition)
    assert len(result.copied) >= 2
    below_its_base_timestamp = 0  # batches whose header does not give their minimum
    for m in rlmm_manager.list_remote_log_segments(src.topic_id_partition):
        truth = min(records[n].timestamp or 0 for n in range(m.start_offset, m.end_offset + 1))
        manifest = SegmentManifest.of(m)
        assert manifest is not None and manifest.smallest_timestamp_ms == truth
        for h, data in RecordBatchReader(pdir.segment(m.start_offset).log_path).batches():
            below_its_base_timestamp += min(r.timestamp for r in decode_batch(h, data)) < (
                h.base_timestamp
            )
    assert below_its_base_timestamp


def _move_offsets(pdir: PartitionDir, to: Path, keep: Callable[[int], bool]) -> None:
    """Move every offset-named file of ``pdir`` (segments, indexes, snapshots) whose
    offset ``keep`` refuses into ``to``: what Kafka's retention does, or a log not yet
    written that far."""
    to.mkdir(exist_ok=True)
    for f in list(pdir.path.iterdir()):
        if f.name[:20].isdigit() and not keep(int(f.name[:20])):
            f.rename(to / f.name)


async def test_offsets_the_broker_deleted_before_they_were_copied_are_reported_once(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker knows nothing of the sidecar: its local retention deletes segments
    whether or not they were copied. A copy lag that outruns it loses them to the
    archive, and that must be loud: an error naming the offsets, a counter per topic,
    the round's count, once however many rounds see the gap."""
    pdir = write_partition(tmp_path / "logs", "orders", 0, records=1500, epochs=(0,))
    segs = pdir.segments()
    assert len(segs) >= 7
    later = tmp_path / "later"
    _move_offsets(pdir, later, lambda o: o < segs[3].base_offset)  # s2 is the active one
    src = source(pdir)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    assert [m.start_offset for m in (await rlm.copy_round(tp)).copied] == [0, segs[1].base_offset]
    # The log grows on; then retention deletes s0..s3 while s2 and s3 were never copied.
    for f in list(later.iterdir()):
        f.rename(pdir.path / f.name)
    gone = tmp_path / "deleted"
    _move_offsets(pdir, gone, lambda o: o >= segs[4].base_offset)

    def missed_total() -> float | None:
        return rlm.metrics.registry.get_sample_value(
            "rlmm_offload_offsets_missed_total", {"topic": "orders"}
        )

    assert missed_total() == 0  # created with the topic: increase() has a first sample
    with caplog.at_level(logging.ERROR):
        result = await rlm.copy_round(tp)
    missed = segs[4].base_offset - segs[2].base_offset
    assert result.offsets_missed == missed
    assert [m.start_offset for m in result.copied] == [s.base_offset for s in segs[4:-1]]
    text = f"offsets {segs[2].base_offset}..{segs[4].base_offset - 1} were deleted"
    assert [r for r in caplog.records if text in r.getMessage() and "orders" in r.getMessage()]
    assert missed_total() == missed
    # the archive continues after the gap; the gap is not reported again
    assert (await rlm.copy_round(tp)).offsets_missed == 0
    assert missed_total() == missed


async def test_a_log_cut_before_anything_was_copied_is_not_a_miss(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    """Retention that ran before rlmm came deleted nothing rlmm was due to copy."""
    pdir = write_partition(tmp_path / "logs", "orders", 0, epochs=(0,))
    segs = pdir.segments()
    _move_offsets(pdir, tmp_path / "deleted", lambda o: o >= segs[1].base_offset)
    src = source(pdir, log_start_offset=segs[1].base_offset)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    result = await rlm.copy_round(src.topic_id_partition)
    assert result.offsets_missed == 0 and result.copied
    assert result.copied[0].start_offset == segs[1].base_offset


async def test_a_gap_after_retention_emptied_the_archive_is_still_a_miss(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    """Remote retention expired everything the archive held; the broker then deleted
    segments never copied. Nothing is archived at that moment, yet it is a miss, not a
    log cut before rlmm came (seen in a soak: 412 records went unreported)."""
    pdir = write_partition(tmp_path / "logs", "orders", 0, records=1500, epochs=(0,))
    segs = pdir.segments()
    later = tmp_path / "later"
    _move_offsets(pdir, later, lambda o: o < segs[3].base_offset)
    # generated timestamps are 1_700_000_000_000 + offset: s0 and s1 expire, s2.. do not
    clock = [1_700_000_000_000]
    retention = RetentionSettings(retention_ms=3_600_000, retention_bytes=-1)
    src = source(pdir, retention)
    rlm = make_rlm(clock_ms=lambda: clock[0])
    await rlm.on_leadership_changes([src], start_tasks=False)
    tp = src.topic_id_partition
    assert len((await rlm.copy_round(tp)).copied) == 2
    clock[0] = 1_700_000_000_000 + segs[2].base_offset + 3_600_000
    assert len((await rlm.expire_round(tp)).deleted) == 2
    assert rlm.highest_remote_offset(tp) == -1  # the archive is empty
    for f in list(later.iterdir()):
        f.rename(pdir.path / f.name)
    _move_offsets(pdir, tmp_path / "deleted", lambda o: o >= segs[4].base_offset)
    result = await rlm.copy_round(tp)
    assert result.offsets_missed == segs[4].base_offset - segs[2].base_offset
    assert result.copied and result.copied[0].start_offset == segs[4].base_offset
