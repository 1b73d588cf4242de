"""Point lookup latency of the RLMM with 1k and 1M segments in one partition.

The manager is restored from a snapshot holding the segments (the public restart
path), then ``remote_log_segment_metadata(tp, epoch, offset)`` is timed call by call
at random offsets. Memory per cached segment is measured with tracemalloc on a cache
built through the normal add + finish path. Targets: p99 <= 20 us at 1M, p99(1M) /
p99(1k) <= 3, memory <= 1 KiB per segment. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.memory import MemoryEventLog
from rlmm.cache import RemoteLogMetadataCache
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.metadata_store import RemotePartitionMetadataStore
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for
from rlmm.snapshotting import SnapshotPolicy
from snapshot import Snapshot, SnapshotStore

N = 50
SEG = 1000  # offsets per segment
EPOCH_EVERY = 10_000  # segments per leader epoch


def build_cache(tp: TopicIdPartition, count: int) -> RemoteLogMetadataCache:
    cache = RemoteLogMetadataCache(tp)
    for i in range(count):
        start = i * SEG
        m = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            start,
            start + SEG - 1,
            start,
            1,
            1,
            1 << 30,
            {i // EPOCH_EVERY: start},
        )
        cache.add_copy_in_progress_segment(m)
        cache.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                m.remote_log_segment_id, 2, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
            )
        )
    return cache


def state_of(tp: TopicIdPartition, count: int) -> list:
    """The snapshot state of ``count`` finished segments (as RemoteLogMetadataCache writes it)."""
    segments = []
    index: dict[int, list] = {}
    for i in range(count):
        start = i * SEG
        raw = uuid.uuid4().bytes
        epoch = i // EPOCH_EVERY
        segments.append(
            [raw, start, start + SEG - 1, start, 1, 2, 1 << 30, [epoch, start], 1, None, False]
        )
        index.setdefault(epoch, []).append([start, raw])
    epochs = [[e, idx, [], idx[-1][0] + SEG - 1] for e, idx in index.items()]
    return [[tp.topic_id.bytes, tp.topic, tp.partition, [segments, epochs], None]]


async def lookups(count: int, samples: int) -> dict[str, object]:
    tp = TopicIdPartition(uuid.uuid4(), "bench", 0)
    p = metadata_partition_for(tp, N)
    with tempfile.TemporaryDirectory() as d:
        SnapshotStore(d).write(Snapshot(N, {p: 0}, state_of(tp, count), 0))
        log = MemoryEventLog(N)
        await log.append(p, b"placeholder for the snapshotted offset 0")
        manager = TopicBasedRemoteLogMetadataManager(log, snapshot_policy=SnapshotPolicy(Path(d)))
        t0 = time.perf_counter()
        await manager.start()
        await manager.on_partition_leadership_changes([tp], [])
        await manager.wait_until_ready([tp], 600)
        restore_s = time.perf_counter() - t0
        rng = random.Random(1)
        targets = [rng.randrange(count * SEG) for _ in range(samples)]
        lookup = manager.remote_log_segment_metadata
        perf = time.perf_counter_ns
        times = []
        gc.disable()
        for offset in targets:
            epoch = offset // SEG // EPOCH_EVERY
            t = perf()
            found = lookup(tp, epoch, offset)
            times.append(perf() - t)
            assert found is not None and found.start_offset <= offset <= found.end_offset
        gc.enable()
        manager._snapshotter = None  # do not rewrite the snapshot on close
        await manager.close()
    times.sort()
    return {
        "segments": count,
        "restore_seconds": round(restore_s, 2),
        "samples": samples,
        "p50_us": round(times[len(times) // 2] / 1000, 2),
        "p99_us": round(times[int(len(times) * 0.99)] / 1000, 2),
        "max_us": round(times[-1] / 1000, 2),
    }


def memory_per_segment(count: int) -> float:
    tp = TopicIdPartition(uuid.uuid4(), "bench", 0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = RemotePartitionMetadataStore()
    store.caches[tp] = build_cache(tp, count)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(store.caches[tp].segments) == count
    return (after - before) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--memory-segments", type=int, default=100_000)
    args = parser.parse_args()
    small = asyncio.run(lookups(1000, args.samples))
    large = asyncio.run(lookups(args.large, args.samples))
    mem = memory_per_segment(args.memory_segments)
    print(
        json.dumps(
            {
                "benchmark": "rlmm_lookup",
                "machine": machine(),
                "small": small,
                "large": large,
                "p99_ratio_large_vs_small": round(large["p99_us"] / small["p99_us"], 2),
                "bytes_per_cached_segment": round(mem, 1),
                "targets": {"p99_us_at_1M": 20, "ratio": 3, "bytes_per_segment": 1024},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
