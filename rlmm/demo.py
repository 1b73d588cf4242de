"""`make demo`: tiered storage end to end on the embedded defaults, with real files.

Writes a real Kafka partition dir (several segments, gzip, two leader epochs, one
aborted transaction), copies every rolled segment to local remote storage through
the topic-based RLMM (STARTED -> copy -> FINISHED, events in the file event log),
serves offset lookups and fetches from remote storage, then restarts the manager from
its snapshot and checks that the rebuilt cache is identical. Exits non-zero if any
check fails.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from remote import IndexType, PartitionDir, PartitionDirWriter, generate_records, iter_records
from remote.segment_data import log_segment_data
from rlmm.config import RlmmConfig, load_config
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

ROOT = Path(__file__).resolve().parents[1]
console = Console()


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"demo check failed: {message}")


def write_partition(parent: Path) -> PartitionDir:
    """A real Kafka partition dir: 12k records in 48 KiB segments, epochs 0 and 3."""
    with PartitionDirWriter(
        parent, "orders", 0, segment_bytes=48 * 1024, compression="gzip"
    ) as writer:
        writer.append_records(generate_records(6000, value_size=100), batch_records=50)
        writer.set_leader_epoch(3)
        writer.append_records(generate_records(4000, start=6000, value_size=100), batch_records=50)
        writer.append_records(
            generate_records(10, start=10_000), producer_id=7, producer_epoch=0, transactional=True
        )
        writer.abort_transaction(producer_id=7, producer_epoch=0)
        writer.append_records(
            generate_records(6000, start=10_010, value_size=100), batch_records=50
        )
    return PartitionDir(parent / "orders-0")


async def offload(config: RlmmConfig, pdir: PartitionDir) -> dict[str, object]:
    tp = pdir.topic_id_partition()
    rsm = open_remote_storage(config)
    manager = create_manager(config, open_event_log(config))
    await manager.start()
    await manager.on_partition_leadership_changes([tp], [])
    await manager.wait_until_ready([tp], float(config.manager["ready_timeout_s"]))
    segments = pdir.segments()[:-1]  # the last one is active: never copied
    t0 = time.perf_counter()
    for seg in segments:
        summary = seg.summary()
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            summary.base_offset,
            summary.end_offset,
            summary.max_timestamp_ms,
            config.broker_id,
            int(time.time() * 1000),
            summary.size_in_bytes,
            summary.segment_leader_epochs,
            txn_index_empty=summary.txn_index_empty,
        )
        await manager.add_remote_log_segment_metadata(metadata)
        custom = await asyncio.to_thread(
            rsm.copy_log_segment_data, metadata, log_segment_data(seg, summary)
        )
        await manager.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id,
                int(time.time() * 1000),
                custom,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                config.broker_id,
            )
        )
    copy_s = time.perf_counter() - t0

    # Serve a consumer fetch at offset 7777 in epoch 3 from remote storage.
    target = 7777
    found = manager.remote_log_segment_metadata(tp, 3, target)
    check(found is not None, f"offset {target} in epoch 3 is not served from remote storage")
    assert found is not None
    with rsm.fetch_log_segment(found, 0) as stream:
        data = stream.read()
    record = next(r for r in iter_records(data, name="remote segment") if r.offset == target)
    check(record.key == b"7777", f"offset {target} holds {record.key!r}, expected b'7777'")
    offset_index = rsm.fetch_index(found, IndexType.OFFSET)
    txn_segment = manager.next_segment_with_txn_index(tp, 3, 0)

    table = Table(title=f"remote segments of {tp}")
    for col in ("start", "end", "epochs", "bytes", "state", "txn index"):
        table.add_column(col)
    for m in manager.list_remote_log_segments(tp):
        table.add_row(
            str(m.start_offset),
            str(m.end_offset),
            str(dict(m.segment_leader_epochs)),
            str(m.segment_size_in_bytes),
            m.state.name,
            "-" if m.txn_index_empty else "aborted txns",
        )
    console.print(table)
    fingerprint = manager.fingerprint()
    applied = manager.stats.applied_events
    await manager.close()  # clean shutdown: final snapshot

    restarted = create_manager(config, open_event_log(config))
    t1 = time.perf_counter()
    await restarted.start()
    await restarted.on_partition_leadership_changes([tp], [])
    await restarted.wait_until_ready([tp], 30)
    restart_s = time.perf_counter() - t1
    same = restarted.fingerprint() == fingerprint
    replayed = restarted.stats.applied_events
    await restarted.close()
    rsm.close()
    check(same, "state rebuilt from the snapshot differs from the live state")
    return {
        "segments copied": len(segments),
        "events applied": applied,
        "copy time": f"{copy_s:.2f}s",
        f"offset {target} (epoch 3)": f"key={record.key!r} in segment {found.start_offset}",
        "offset index bytes fetched": len(offset_index),
        "segment with aborted txns": None if txn_segment is None else txn_segment.start_offset,
        "restart from snapshot": f"{restart_s * 1000:.0f} ms, {replayed} events replayed",
        "state after restart identical": same,
    }


def main() -> int:
    data_dir = ROOT / "demo-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    config = load_config(ROOT / "config" / "embedded.toml", overrides={"data_dir": str(data_dir)})
    pdir = write_partition(data_dir / "kafka-logs")
    console.print(f"[bold]Kafka partition dir[/] {pdir.path}: {len(pdir.segments())} segments")
    result = asyncio.run(offload(config, pdir))
    summary = Table(title="rlmm demo", show_header=False)
    for key, value in result.items():
        summary.add_row(key, str(value))
    console.print(summary)
    console.print(f"event log, snapshots and remote objects are under {data_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
