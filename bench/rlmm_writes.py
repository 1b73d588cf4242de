"""Acknowledged segment lifecycles/s (add STARTED + update FINISHED) through the manager.

FileEventLog with fsync=always (every acknowledged event is on disk), 1 writer vs 64
concurrent writers in the same run. Target: 64 writers >= 2,000 lifecycles/s and
>= 10x one writer. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.file import FileEventLog
from eventlog.memory import MemoryEventLog
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

PARTITIONS = 50


async def run(writers: int, seconds: float, fsync: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as d:
        log = (
            MemoryEventLog(PARTITIONS)
            if fsync == "memory"
            else FileEventLog(Path(d) / "log", PARTITIONS, fsync=fsync)
        )
        manager = TopicBasedRemoteLogMetadataManager(log, close_event_log=True)
        await manager.start()
        tps = [TopicIdPartition(uuid.uuid4(), "bench", i) for i in range(max(writers, 8))]
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 30)
        done = 0
        deadline = time.perf_counter() + seconds
        latencies: list[float] = []

        async def writer(i: int) -> None:
            nonlocal done
            tp = tps[i % len(tps)]
            offset = 0
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                m = RemoteLogSegmentMetadata(
                    RemoteLogSegmentId.generate_new(tp),
                    offset,
                    offset + 999,
                    0,
                    1,
                    0,
                    1 << 30,
                    {0: offset},
                )
                await manager.add_remote_log_segment_metadata(m)
                await manager.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(
                        m.remote_log_segment_id,
                        1,
                        None,
                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                        1,
                    )
                )
                latencies.append(time.perf_counter() - t0)
                offset += 1000
                done += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(i) for i in range(writers)))
        elapsed = time.perf_counter() - t0
        await manager.close()
        latencies.sort()
        return {
            "writers": writers,
            "lifecycles": done,
            "seconds": round(elapsed, 3),
            "lifecycles_per_s": round(done / elapsed, 1),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--fsync", default="always", choices=["always", "interval", "memory"])
    args = parser.parse_args()
    one = asyncio.run(run(1, args.seconds, args.fsync))
    many = asyncio.run(run(64, args.seconds, args.fsync))
    print(
        json.dumps(
            {
                "benchmark": "rlmm_writes",
                "event_log": f"FileEventLog fsync={args.fsync}, {PARTITIONS} partitions",
                "machine": machine(),
                "one_writer": one,
                "64_writers": many,
                "ratio_64_vs_1": round(many["lifecycles_per_s"] / one["lifecycles_per_s"], 1),
                "targets": {"64_writers_lifecycles_per_s": 2000, "ratio": 10},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
