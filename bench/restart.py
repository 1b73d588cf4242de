"""Cold restart of the RLMM: full replay vs snapshot + 1% tail vs snapshot only.

1,000 user partitions x 1,000 segments (1M segments, 2M events: add + finished) on a
FileEventLog with 50 partitions. Each restart runs in a fresh process (so peak RSS is
its own): start the manager, assign every partition, wait until all are ready.
Snapshots restore lazily: start() only indexes each partition's encoded block, the
tail queues on the partitions it touches, and a partition is decoded on its first
read, so each restart then measures that first read (a point lookup) on every
partition in random order ("cold first lookup"), a second read ("warm"), the
on-loop part of taking a snapshot right after the restart, and the peak RSS at
ready and after every partition was read.
Wall-clock and process CPU seconds are both reported: on a shared machine the CPU
time is the figure other processes do not inflate.
Targets: snapshot + 1% tail >= 20x faster than the full replay Kafka does and <= 1 s
at 1M segments; cold first lookup p99 <= 5 ms for a 1k-segment partition; at 10M
segments (``--partitions 10000``, issue 20) ready <= 2 s from snapshot + 1% tail and
peak RSS with every partition read <= 3 GiB. ``--no-full`` skips the full-replay
comparison run (minutes at 10M; the first start, a full replay of the head, stays).
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.file import FileEventLog
from rlmm.codec import encode
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

N = 50
TOPIC_ID = uuid.UUID("3fa85f64-5717-4562-b3fc-2c963f66afa6")


def partitions(count: int) -> list[TopicIdPartition]:
    return [TopicIdPartition(TOPIC_ID, "bench", i) for i in range(count)]


def events_for(tp: TopicIdPartition, segments: int) -> list[bytes]:
    out = []
    for i in range(segments):
        start = i * 10_000
        m = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            start,
            start + 9_999,
            1_700_000_000_000 + i,
            1,
            1_700_000_000_000 + i,
            1 << 30,
            {i // 100: start},
        )
        out.append(encode(m))
        out.append(
            encode(
                RemoteLogSegmentMetadataUpdate(
                    m.remote_log_segment_id, 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
                )
            )
        )
    return out


async def write_events(
    log: FileEventLog, tps: list[TopicIdPartition], segments: int, part: slice
) -> int:
    """Append the ``part`` slice of every partition's event list; returns events written."""
    written = 0
    for tp in tps:
        values = events_for(tp, segments)[part]
        p = metadata_partition_for(tp, N)
        for i in range(0, len(values), 2000):
            await log.append_batch(p, values[i : i + 2000])
        written += len(values)
    return written


async def restart(
    directory: Path, snapshots: Path | None, count: int, segments: int
) -> dict[str, object]:
    log = FileEventLog(directory / "log", N)
    policy = SnapshotPolicy(snapshots, every_events=10**9, interval_s=10**9) if snapshots else None
    manager = TopicBasedRemoteLogMetadataManager(log, snapshot_policy=policy, close_event_log=True)
    tps = partitions(count)
    t0 = time.perf_counter()
    c0 = time.process_time()
    await manager.start()
    t_loaded = time.perf_counter()
    await manager.on_partition_leadership_changes(tps, [])
    await manager.wait_until_ready(tps, 3600)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rss_ready = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    store = manager._store
    cold_at_ready = len(store.cold_partitions())
    t_state = time.perf_counter()
    store.to_state(store.partitions())  # the synchronous (event loop) part of a snapshot
    state_s = time.perf_counter() - t_state
    order = list(tps)
    random.Random(1).shuffle(order)
    first = lookups(manager, order, segments // 2)
    warm = lookups(manager, order, segments // 2)
    result = {
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),  # all threads of this process: robust to a busy machine
        "snapshot_load_seconds": round(t_loaded - t0, 3),
        "events_replayed": manager.stats.applied_events,
        "partitions_cold_at_ready": cold_at_ready,
        "snapshot_state_on_loop_seconds": round(state_s, 3),
        "first_lookup_ms": first,
        "warm_lookup_ms": warm,
        "segments": sum(len(manager.list_remote_log_segments(tp)) for tp in tps),
        "peak_rss_mib_at_ready": round(rss_ready, 1),
        "peak_rss_mib_all_read": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        ),
    }
    if snapshots is not None and "--snapshot-after" in sys.argv:
        await manager.close()  # clean shutdown snapshot (for the snapshot-only run)
    else:
        manager._snapshotter = None  # measure only; leave the snapshot dir as it was
        await manager.close()
    return result


def lookups(
    manager: TopicBasedRemoteLogMetadataManager, order: list[TopicIdPartition], i: int
) -> dict[str, float]:
    """Latency of one point lookup (inside segment ``i``) per partition, in order.

    Wall-clock percentiles, and the same for this thread's CPU time: on a shared
    machine the wall clock also counts the time other processes held the core.
    """
    wall = []
    cpu = []
    for tp in order:
        t = time.perf_counter()
        c = time.thread_time()
        found = manager.remote_log_segment_metadata(tp, i // 100, i * 10_000 + 5_000)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - t)
        assert found is not None and found.start_offset == i * 10_000
    wall.sort()
    cpu.sort()

    def pick(times: list[float], q: float) -> float:
        return round(times[min(len(times) - 1, int(q * len(times)))] * 1000, 3)

    return {
        "p50": pick(wall, 0.5),
        "p99": pick(wall, 0.99),
        "max": pick(wall, 1.0),
        "cpu_p50": pick(cpu, 0.5),
        "cpu_p99": pick(cpu, 0.99),
    }


def measure(
    directory: Path, snapshots: Path | None, count: int, segments: int, snapshot_after: bool
) -> dict:
    cmd = [sys.executable, __file__, "--measure", str(directory), "--partitions", str(count)]
    cmd += ["--segments", str(segments)]
    if snapshots is not None:
        cmd += ["--snapshots", str(snapshots)]
    if snapshot_after:
        cmd.append("--snapshot-after")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--tail", type=float, default=0.01)
    parser.add_argument("--measure", type=Path)
    parser.add_argument("--snapshots", type=Path)
    parser.add_argument("--snapshot-after", action="store_true")
    parser.add_argument("--no-full", action="store_true", help="skip the full-replay run")
    args = parser.parse_args()
    if args.measure:
        result = restart(args.measure, args.snapshots, args.partitions, args.segments)
        print(json.dumps(asyncio.run(result)))
        return
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as d:
        directory = Path(d)
        tps = partitions(args.partitions)
        head_events = int(args.segments * 2 * (1 - args.tail))

        async def build_head() -> tuple[int, float]:
            log = FileEventLog(directory / "log", N, fsync="interval")
            t0 = time.perf_counter()
            n = await write_events(log, tps, args.segments, slice(0, head_events))
            await log.close()
            return n, time.perf_counter() - t0

        head, write_s = asyncio.run(build_head())
        # a manager that lived through the head: its clean-shutdown snapshot
        warm = measure(directory, directory / "snap-head", args.partitions, args.segments, True)

        async def build_tail() -> int:
            log = FileEventLog(directory / "log", N, fsync="interval")
            n = await write_events(log, tps, args.segments, slice(head_events, None))
            await log.close()
            return n

        tail = asyncio.run(build_tail())
        shutil.copytree(directory / "snap-head", directory / "snap-full")
        full = (
            None
            if args.no_full
            else measure(directory, None, args.partitions, args.segments, False)
        )
        snap_tail = measure(
            directory, directory / "snap-head", args.partitions, args.segments, False
        )
        measure(
            directory, directory / "snap-full", args.partitions, args.segments, True
        )  # catch up + snapshot
        snap_only = measure(
            directory, directory / "snap-full", args.partitions, args.segments, False
        )
    print(
        json.dumps(
            {
                "benchmark": "restart",
                "machine": machine(),
                "user_partitions": args.partitions,
                "segments_per_partition": args.segments,
                "events": head + tail,
                "tail_events": tail,
                "write_seconds": round(write_s, 1),
                "first_start_full_replay_of_head": warm,
                "full_replay": full,
                "snapshot_plus_tail": snap_tail,
                "snapshot_only": snap_only,
                "speedup_snapshot_plus_tail_vs_full": None
                if full is None
                else round(full["seconds"] / snap_tail["seconds"], 1),
                "speedup_cpu_snapshot_plus_tail_vs_full": None
                if full is None
                else round(full["cpu_seconds"] / snap_tail["cpu_seconds"], 1),
                "targets": {
                    "speedup": 20,
                    "snapshot_plus_tail_seconds": 1,
                    "snapshot_plus_tail_seconds_at_10M": 2,
                    "peak_rss_mib_all_read_at_10M": 3072,
                    "cold_first_lookup_p99_ms": 5,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
