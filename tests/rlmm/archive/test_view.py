"""MetadataView: read-only snapshot + tail replay of the file and Kafka event logs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from remote.segments import PartitionDir, PartitionDirWriter, generate_records
from rlmm.archive import ArchiveError, open_metadata_view
from rlmm.archive.view import load_metadata_view
from rlmm.factory import create_manager, open_event_log
from rlmm.model import RemoteLogSegmentState
from tests.rlmm.archive._writer_child import TP as LIVE_TP
from tests.rlmm.archive.archive_data import make_config, offload
from tests.rlmm.helpers import sequential_replay

ROOT = Path(__file__).resolve().parents[3]
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def write_dir(parent: Path, topic: str, partition: int, records: int = 600) -> PartitionDir:
    with PartitionDirWriter(parent, topic, partition, segment_bytes=8 * 1024) as w:
        w.append_records(generate_records(records, value_size=50), batch_records=20)
    return PartitionDir(parent / f"{topic}-{partition}")


def test_view_lists_what_was_offloaded(tmp_path: Path) -> None:
    config = make_config(tmp_path / "rlmm")
    dirs = [write_dir(tmp_path / "logs", "orders", p) for p in (1, 0)]
    copied = asyncio.run(offload(config, dirs))
    with open_metadata_view(config) as view:
        assert [(tp.topic, tp.partition) for tp in view.topic_partitions()] == [
            ("orders", 0),
            ("orders", 1),
        ]
        for tp, segments in copied.items():
            assert len(segments) > 2
            assert view.segments(tp) == segments
            assert view.lineage(tp) == segments
            assert all(m.state == FINISHED for m in view.lineage(tp))
            assert view.gaps(tp) == []
            assert view.delete_state(tp) is None
        assert set(view.applied_offsets) == set(range(4))


def test_view_needs_an_existing_log(tmp_path: Path) -> None:
    config = make_config(tmp_path / "nothing")
    with pytest.raises(ArchiveError, match=r"eventlog\.json"):
        open_metadata_view(config)
    assert not (tmp_path / "nothing").exists()  # read-only: nothing created


def test_view_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    data_dir = tmp_path / "rlmm"
    with subprocess.Popen(
        [sys.executable, "-m", "tests.rlmm.archive._writer_child", str(data_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        seen, total = _watch_live_writer(child, data_dir)
    final = open_metadata_view(make_config(data_dir))
    assert len(final.lineage(LIVE_TP)) == total >= seen[-1]


def _watch_live_writer(child: subprocess.Popen[str], data_dir: Path) -> tuple[list[int], int]:
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        lock = data_dir / "metadata-log" / "LOCK"
        holder = lock.read_text().strip()
        seen = []
        for _ in range(3):
            view = open_metadata_view(make_config(data_dir))
            segments = view.segments(LIVE_TP)
            # A consistent prefix: 0..k-1 in order, each either STARTED or FINISHED,
            # only the newest possibly still STARTED.
            assert [m.start_offset for m in segments] == [i * 100 for i in range(len(segments))]
            assert all(m.state == FINISHED for m in segments[:-1])
            assert view.lineage(LIVE_TP) == [m for m in segments if m.state == FINISHED]
            seen.append(len(segments))
            view.close()
        assert seen[0] >= 20 and seen == sorted(seen)
        assert lock.read_text().strip() == holder == str(child.pid)  # never took the lock
        child.stdin.close()
        total = int(child.stdout.readline())
        assert child.wait(timeout=30) == 0
        return seen, total
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


async def _write_history(config_dir: Path, snapshot_every: int) -> None:
    """Segments of 6 partitions with deletes; snapshots every few events."""
    from tests.rlmm.factories import S, segment, tp, update

    config = make_config(config_dir, **{"snapshot.every_events": snapshot_every})
    tps = [tp(p, topic=f"t{p % 2}", topic_id=uuid.UUID(int=p % 2 + 1)) for p in range(6)]
    async with create_manager(config, open_event_log(config)) as manager:
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 30)
        for i in range(40):
            t = tps[i % len(tps)]
            m = segment(t, i * 10, i * 10 + 9, {0: i * 10})
            await manager.add_remote_log_segment_metadata(m)
            await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
            if i % 7 == 3:
                deleting = update(m, S.DELETE_SEGMENT_STARTED)
                await manager.update_remote_log_segment_metadata(deleting)
            if i % 14 == 3:
                await manager.update_remote_log_segment_metadata(
                    update(m, S.DELETE_SEGMENT_FINISHED)
                )
            if i == 25:
                await manager.snapshot()


def test_snapshot_plus_tail_equals_full_replay(tmp_path: Path) -> None:
    data_dir = tmp_path / "rlmm"
    asyncio.run(_write_history(data_dir, snapshot_every=1_000_000))
    with_snapshot = open_metadata_view(make_config(data_dir))
    assert with_snapshot.stats.restored_from_snapshot
    # The final snapshot (taken at close) is complete: make a tail exist after it.
    asyncio.run(_write_more(data_dir))
    with_snapshot = open_metadata_view(make_config(data_dir))
    full = open_metadata_view(make_config(data_dir, **{"snapshot.enabled": False}))
    assert with_snapshot.stats.restored_from_snapshot
    assert not full.stats.restored_from_snapshot
    assert 0 < with_snapshot.stats.replayed_events < full.stats.replayed_events
    assert with_snapshot.fingerprint() == full.fingerprint()
    assert with_snapshot.applied_offsets == full.applied_offsets

    async def reference() -> object:
        async with open_event_log(make_config(data_dir)) as log:
            return (await sequential_replay(log)).fingerprint()

    # (a second writer would have taken the lock: the reference reads after the writers)
    assert full.fingerprint() == asyncio.run(reference())


async def _write_more(data_dir: Path) -> None:
    from tests.rlmm.factories import S, segment, tp, update

    config = make_config(data_dir, **{"snapshot.enabled": False})
    t = tp(9, topic="tail")
    async with create_manager(config, open_event_log(config)) as manager:
        await manager.on_partition_leadership_changes([t], [])
        await manager.wait_until_ready([t], 30)
        for i in range(5):
            m = segment(t, i * 10, i * 10 + 9, {0: i * 10})
            await manager.add_remote_log_segment_metadata(m)
            await manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))


@pytest.mark.kafka
async def test_view_of_a_kafka_event_log(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"rlmm-archive-{uuid.uuid4().hex[:8]}"
    config = make_config(
        tmp_path / "rlmm",
        **{
            "eventlog.type": "kafka",
            "eventlog.bootstrap_servers": kafka_bootstrap,
            "eventlog.topic": topic,
            "eventlog.replication_factor": 1,
            "eventlog.consumer_config": {"fetch_max_wait_ms": 20},
            "snapshot.enabled": False,
        },
    )
    dirs = [write_dir(tmp_path / "logs", "orders", p, records=300) for p in (0, 1, 2)]
    copied = await offload(config, dirs)
    view = await load_metadata_view(config)
    assert sorted(copied, key=lambda t: t.partition) == view.topic_partitions()
    for tp, segments in copied.items():
        assert view.lineage(tp) == segments
    assert view.stats.replayed_events == 2 * sum(map(len, copied.values()))


@pytest.mark.kafka
def test_view_does_not_create_a_missing_kafka_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        **{
            "eventlog.type": "kafka",
            "eventlog.bootstrap_servers": kafka_bootstrap,
            "eventlog.topic": f"rlmm-missing-{uuid.uuid4().hex[:8]}",
            "eventlog.replication_factor": 1,
            "eventlog.init_timeout_ms": 3000,
        },
    )
    with pytest.raises(ArchiveError, match="rlmm-missing-") as caught:
        open_metadata_view(config)
    assert "does not exist" in str(caught.value)


async def test_the_sync_view_works_inside_a_running_loop(tmp_path: Path) -> None:
    config = make_config(tmp_path / "rlmm")
    copied = await offload(config, [write_dir(tmp_path / "logs", "inloop", 0)])
    view = open_metadata_view(config)  # loads on a private thread: no nested-loop error
    ((tp, segments),) = copied.items()
    assert view.lineage(tp) == segments


def test_a_replay_whose_events_are_gone_is_refused(tmp_path: Path) -> None:
    """Events deleted from the log (as retention deletes old segments) with no snapshot
    covering them: the view refuses rather than show an incomplete state."""
    config = make_config(
        tmp_path / "rlmm",
        **{"eventlog.partitions": 1, "eventlog.segment_bytes": 1024, "snapshot.enabled": False},
    )
    asyncio.run(offload(config, [write_dir(tmp_path / "logs", "gone", 0, records=300)]))
    part = tmp_path / "rlmm" / "metadata-log" / "__remote_log_metadata-0"
    logs = sorted(part.glob("*.log"))
    assert len(logs) >= 2
    for path in part.glob(f"{logs[0].stem}.*"):
        path.unlink()  # the oldest segment, as retention removes it
    first_left = int(logs[1].stem)
    # (the file log names it itself; the view's own check covers logs that would not)
    with pytest.raises(ArchiveError, match=f"log starts at (offset )?{first_left}"):
        open_metadata_view(config)


def test_a_snapshot_covers_what_retention_deleted(tmp_path: Path) -> None:
    from eventlog._log_dir import stored_start_offsets

    config = make_config(
        tmp_path / "rlmm", **{"eventlog.partitions": 1, "eventlog.segment_bytes": 1024}
    )
    copied = asyncio.run(offload(config, [write_dir(tmp_path / "logs", "kept", 0, records=300)]))
    part = tmp_path / "rlmm" / "metadata-log" / "__remote_log_metadata-0"
    logs = sorted(part.glob("*.log"))
    if stored_start_offsets(tmp_path / "rlmm" / "metadata-log", 1)[0] == 0:
        # The manager's own retention kept everything: remove the oldest segment as it
        # would (its final snapshot covers the whole log).
        assert len(logs) >= 2
        for path in part.glob(f"{logs[0].stem}.*"):
            path.unlink()
    assert stored_start_offsets(tmp_path / "rlmm" / "metadata-log", 1)[0] > 0
    view = open_metadata_view(config)
    assert view.stats.restored_from_snapshot
    ((tp, segments),) = copied.items()
    assert view.lineage(tp) == segments
