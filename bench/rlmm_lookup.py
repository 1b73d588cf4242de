"""Point lookup latency of the RLMM with 1k and 1M (or 10M: --large) segments in one partition.

The manager is restored from a snapshot holding both partitions (the public restart
path), then ``remote_log_segment_metadata(tp, epoch, offset)`` is timed call by call
at random offsets, the two partitions taking turns (so a busy machine's load falls
on both alike), with the cyclic GC off and then on; the p99 of two back-to-back clock
reads is reported as the machine's noise floor. Memory per cached segment is measured
with tracemalloc on a cache built through the normal add + finish path, and the
process's peak RSS is reported.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.memory import MemoryEventLog
from rlmm.cache import (
    RemoteLogLeaderEpochState,
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
)
from rlmm.cache._columns import WIDTH
from rlmm.manager import TopicBasedRemoteLogMetadataManager
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
    i[14::16] = array("i", [-(n // EPOCH_EVERY) - 1 for n in range(count)])  # inline epoch
    i[15::16] = array("i", [int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED) | 1 << 8]) * count
    del q, i, uuids
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


def timed(
    lookup: Callable[..., Any], tp: TopicIdPartition, targets: list[int], gc_on: bool
) -> list[int]:
    """Nanoseconds of each lookup (every answer checked), the cyclic GC on or off."""
    perf = time.perf_counter_ns
    times = []
    if not gc_on:
        gc.disable()
    for offset in targets:
        epoch = offset // SEG // EPOCH_EVERY
        t = perf()
        found = lookup(tp, epoch, offset)
        times.append(perf() - t)
        assert found is not None and found.start_offset <= offset <= found.end_offset
    gc.enable()
    return times


def summary(times: list[int]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_us": round(times[len(times) // 2] / 1000, 2),
        "p99_us": round(times[int(len(times) * 0.99)] / 1000, 2),
        "max_us": round(times[-1] / 1000, 2),
    }


async def lookups(counts: list[int], samples: int, rounds: int) -> list[dict[str, Any]]:
    """Each count in its own partition of one restored manager, timed in alternation.

    The partitions' lookups take turns in ``rounds`` slices (GC off, then the same
    targets GC on), so load from other processes on a shared machine falls on all
    sizes alike; the p99 of two back-to-back clock reads is the machine's noise floor.
    """
    tps = [TopicIdPartition(uuid.uuid4(), "bench", i) for i in range(len(counts))]
    with tempfile.TemporaryDirectory() as d:
        state: list[Any] = []
        applied: dict[int, int] = {}
        for tp, count in zip(tps, counts, strict=True):
            state += state_of(tp, count)
            applied[metadata_partition_for(tp, N)] = 0
        SnapshotStore(d).write(Snapshot(N, applied, state, 0))
        del state
        log = MemoryEventLog(N)
        for p in applied:
            await log.append(p, b"placeholder for the snapshotted offset 0")
        manager = TopicBasedRemoteLogMetadataManager(log, snapshot_policy=SnapshotPolicy(Path(d)))
        t0 = time.perf_counter()
        await manager.start()
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 600)
        restore_s = time.perf_counter() - t0
        lookup = manager.remote_log_segment_metadata
        rng = random.Random(1)
        results: list[dict[str, Any]] = []
        runs: list[tuple[list[int], list[list[int]]]] = []
        for tp, count in zip(tps, counts, strict=True):
            t = time.perf_counter()
            lookup(tp, 0, 0)  # the first read decodes the partition's block
            first_ms = (time.perf_counter() - t) * 1000
            results.append(
                {"segments": count, "restore_seconds": round(restore_s, 2)}
                | {"first_read_ms": round(first_ms, 2), "samples": samples}
            )
            targets = [rng.randrange(count * SEG) for _ in range(samples)]
            runs.append((targets, [[], []]))
        step = -(-samples // rounds)
        for r in range(rounds):
            for tp, (targets, (off, on)) in zip(tps, runs, strict=True):
                chunk = targets[r * step : (r + 1) * step]
                off += timed(lookup, tp, chunk, gc_on=False)
                on += timed(lookup, tp, chunk, gc_on=True)
        for result, (_, (off, on)) in zip(results, runs, strict=True):
            result |= summary(off)
            result["gc_enabled"] = summary(on)
        manager._snapshotter = None  # do not rewrite the snapshot on close
        await manager.close()
    return results


def noise_floor(samples: int) -> dict[str, float]:
    """Two back-to-back clock reads: what the machine adds to any timed call."""
    perf = time.perf_counter_ns
    times = []
    gc.disable()
    for _ in range(samples):
        t = perf()
        times.append(perf() - t)
    gc.enable()
    return summary(times)


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
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    small, large = asyncio.run(lookups([1000, args.large], args.samples, args.rounds))
    floor = noise_floor(args.samples)
    mem = memory_per_segment(args.memory_segments)
    print(
        json.dumps(
            {
                "benchmark": "rlmm_lookup",
                "machine": machine(),
                "small": small,
                "large": large,
                "clock_noise_floor": floor,
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
