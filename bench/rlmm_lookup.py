"""Point lookup latency of the RLMM with 1k and 1M (or 10M: --large) segments in one partition.

The manager is restored from a snapshot holding the segments (the public restart
path), then ``remote_log_segment_metadata(tp, epoch, offset)`` is timed call by call
at random offsets. Memory per cached segment is measured with tracemalloc on a cache
built through the normal add + finish path, and the process's peak RSS is reported.
Targets (issue 20): <= 256 B per cached segment, p99 <= 5 us at 10M, p99(large) /
p99(1k) <= 2. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import sys
import tempfile
import time
import tracemalloc
import uuid
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.memory import MemoryEventLog
from rlmm._segment_columns import WIDTH
from rlmm.cache import RemoteLogLeaderEpochState, RemoteLogMetadataCache
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
    """Snapshot state of ``count`` finished segments: one cache block (format 2).

    The records are filled directly (10M segments through add + finish would take
    minutes of setup); lookups below assert every answer, so a wrong block shows.
    """
    assert sys.byteorder == "little"  # the records are little-endian; so are these views
    cache = RemoteLogMetadataCache(tp)
    cols = cache.columns
    starts = array("q", range(0, count * SEG, SEG))
    cols.recs = bytearray(WIDTH * count)
    q = memoryview(cols.recs).cast("q")  # 8 per record: uuid (2), start, end, max_ts, event_ts
    uuids = memoryview(os.urandom(16 * count)).cast("q")
    q[0::8], q[1::8] = uuids[0::2], uuids[1::2]
    q[2::8] = starts
    q[3::8] = array("q", range(SEG - 1, count * SEG, SEG))
    q[4::8] = starts
    i = memoryview(cols.recs).cast("i")  # 16 per record: ..., size, broker, ep_first, tail
    i[12::16] = array("i", [1 << 30]) * count
    i[13::16] = array("i", [1]) * count
    i[14::16] = array("i", range(count))
    i[15::16] = array("i", [int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED) | 1 << 8]) * count
    del q, i, uuids
    cols.eps = array("q", bytes(16 * count))
    cols.eps[0::2] = array("q", [n // EPOCH_EVERY for n in range(count)])
    cols.eps[1::2] = starts
    for first in range(0, count, EPOCH_EVERY):
        last = min(first + EPOCH_EVERY, count)
        st = RemoteLogLeaderEpochState(cache)
        st.starts = array("q", range(first * SEG, last * SEG, SEG))
        st.ends = array("q", range(first * SEG + SEG - 1, last * SEG, SEG))
        st.rows = array("i", range(first, last))
        st.highest_offset = last * SEG - 1
        st.size_bytes = (last - first) << 30
        cache.epochs[first // EPOCH_EVERY] = st
    cache.total_size_bytes = count << 30
    return [[tp.topic_id.bytes, tp.topic, tp.partition, cache.to_block(), None, [], []]]


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
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "targets": {"p99_us_at_10M": 5, "ratio": 2, "bytes_per_segment": 256},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
