"""Benchmark: on-disk size of the embedded metadata log (FileEventLog) after N events,
with and without retention, measured in the same run.

Events are real RLMM records (rlmm.codec encodings of segment adds and their
COPY_SEGMENT_FINISHED / DELETE_SEGMENT_* updates, a new segment id each), spread over
the metadata partitions as the manager spreads them. The retention runs register,
after every ``--every`` events (the ``[snapshot] every_events`` default), the claim
the manager's Snapshotter registers after a snapshot write + prune: per partition
the lowest ``applied + 1`` over the ``--keep`` kept snapshots; the log then deletes
whole segments below it. The manager itself is not in the loop (10 M events through
it would take far longer than this shared machine allows); the claims are the same.
Appends use ``fsync="interval"`` (size does not depend on the fsync policy).

Retention can only delete sealed segments, so the retained size is about
``partitions * segment_bytes`` plus the events between the two kept snapshots: the
run with the default 64 MiB segments shows that, and one with smaller segments
shows what ``eventlog.segment_bytes`` buys. Prints ONE JSON document.

Usage: python bench/metadata_log_size.py [--events 10000000] [--partitions 50]
       [--every 100000] [--keep 2] [--segment-mib 64,4] [--dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.file import FileEventLog
from rlmm.codec import encode
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for

MiB = 1 << 20
BATCH = 2000


def event_pool(partitions: int, size: int, seed: int = 7) -> list[tuple[int, bytes]]:
    """``(metadata partition, encoded event)``: a segment's life is 4 events."""
    rng = random.Random(seed)
    tps = [TopicIdPartition(uuid.UUID(int=rng.getrandbits(128)), "orders", p) for p in range(64)]
    pool: list[tuple[int, bytes]] = []
    offsets = dict.fromkeys(tps, 0)
    while len(pool) < size:
        tp = rng.choice(tps)
        start = offsets[tp]
        offsets[tp] += 10_000
        segment_id = RemoteLogSegmentId(tp, uuid.UUID(int=rng.getrandbits(128)))
        now = 1_700_000_000_000 + len(pool)
        add = RemoteLogSegmentMetadata(
            segment_id, start, start + 9_999, now, 1, now, 64 * MiB, {start // 100_000: start}
        )
        p = metadata_partition_for(tp, partitions)
        pool.append((p, encode(add)))
        for state in (
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
            RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
        ):
            update = RemoteLogSegmentMetadataUpdate(segment_id, now, None, state, 1)
            pool.append((p, encode(update)))
    return pool


def disk_usage(directory: Path) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of every file under ``directory``."""
    allocated = apparent = 0
    for root, _, files in os.walk(directory):
        for name in files:
            st = os.stat(os.path.join(root, name))
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


async def run(
    directory: Path,
    events: int,
    partitions: int,
    segment_bytes: int,
    every: int,
    keep: int,
    retention: bool,
    pool: list[tuple[int, bytes]],
) -> dict[str, Any]:
    started = time.perf_counter()
    kept: deque[dict[int, int]] = deque(maxlen=keep)
    async with FileEventLog(
        directory, partitions, fsync="interval", segment_bytes=segment_bytes
    ) as log:
        ends = dict.fromkeys(range(partitions), 0)
        written = 0
        next_snapshot = every
        while written < events:
            n = min(BATCH, events - written)
            by_partition: dict[int, list[bytes]] = {}
            for i in range(written, written + n):
                p, value = pool[i % len(pool)]
                by_partition.setdefault(p, []).append(value)
            for p, values in by_partition.items():
                offsets = await log.append_batch(p, values)
                ends[p] = offsets[-1] + 1
            written += n
            if retention and written >= next_snapshot:
                next_snapshot += every
                # What the Snapshotter registers: a snapshot at the applied offsets,
                # then the floor every kept snapshot allows.
                kept.append({p: end - 1 for p, end in ends.items() if end > 0})
                floors = {p: min(s.get(p, -1) + 1 for s in kept) for p in range(partitions)}
                await log.register_retention(
                    "bench", {p: f for p, f in floors.items() if f > 0}, {"bench": True}
                )
        deleted = log.stats.retention_deleted_segments
        starts = await log.start_offsets(range(partitions))
    allocated, apparent = disk_usage(directory)
    return {
        "retention": retention,
        "segment_mib": segment_bytes / MiB,
        "events": written,
        "seconds": round(time.perf_counter() - started, 1),
        "disk_bytes": allocated,
        "disk_mib": round(allocated / MiB, 1),
        "apparent_mib": round(apparent / MiB, 1),
        "segments_deleted": deleted,
        "events_retained": sum(ends.values()) - sum(starts.values()),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--keep", type=int, default=2)
    parser.add_argument("--segment-mib", default="64,4")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    pool = event_pool(args.partitions, 200_000)
    mean_event = sum(len(v) for _, v in pool) / len(pool)
    runs = []
    segment_sizes = [int(float(s) * MiB) for s in args.segment_mib.split(",")]
    cases = [(segment_sizes[0], False)] + [(s, True) for s in segment_sizes]
    for segment_bytes, retention in cases:
        with tempfile.TemporaryDirectory(dir=args.dir) as d:
            runs.append(
                await run(
                    Path(d) / "metadata-log",
                    args.events,
                    args.partitions,
                    segment_bytes,
                    args.every,
                    args.keep,
                    retention,
                    pool,
                )
            )
    baseline = runs[0]["disk_bytes"]
    for r in runs:
        r["ratio_to_no_retention"] = round(r["disk_bytes"] / baseline, 4)
    print(
        json.dumps(
            {
                "benchmark": "metadata_log_size",
                "machine": machine(),
                "events": args.events,
                "partitions": args.partitions,
                "snapshot_every_events": args.every,
                "snapshots_kept": args.keep,
                "mean_event_bytes": round(mean_event, 1),
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
