"""Benchmark: acknowledged appends/s on FileEventLog with fsync="always".

Runs 1, 16 and 256 concurrent writers (small values) against group commit, and, in
the same run, the baseline: the same log with ``group_commit=False`` (one write + one
fsync per append). Prints ONE JSON document; the figure that matters is the ratio
``appends_per_s(256 writers) / appends_per_s(baseline)`` (target >= 10), since
absolute numbers depend on the disk and on whoever else shares the machine.

Usage: python bench/eventlog_append.py [--seconds 3] [--writers 1,16,256] [--dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.file import FileEventLog


async def run_case(
    directory: Path, writers: int, seconds: float, value_bytes: int, partitions: int, group: bool
) -> dict[str, Any]:
    value = b"x" * value_bytes
    latencies: list[float] = []
    async with FileEventLog(directory, partitions, fsync="always", group_commit=group) as log:
        deadline = time.perf_counter() + seconds

        async def writer(w: int) -> int:
            done = 0
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                await log.append(w % partitions, value)
                latencies.append(time.perf_counter() - t0)
                done += 1
            return done

        started = time.perf_counter()
        counts = await asyncio.gather(*(writer(w) for w in range(writers)))
        elapsed = time.perf_counter() - started
        stats = log.stats
    total = sum(counts)
    latencies.sort()
    return {
        "writers": writers,
        "group_commit": group,
        "appends": total,
        "seconds": round(elapsed, 3),
        "appends_per_s": round(total / elapsed, 1),
        "fsyncs": stats.fsyncs,
        "records_per_fsync": round(total / max(stats.fsyncs, 1), 2),
        "latency_ms_p50": round(statistics.median(latencies) * 1000, 3),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per case")
    parser.add_argument("--writers", default="1,16,256", help="comma-separated writer counts")
    parser.add_argument("--baseline-writers", type=int, default=16)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()
    writer_counts = [int(w) for w in args.writers.split(",")]

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="eventlog-bench-") as tmp:
        root = Path(tmp)
        common = (args.seconds, args.value_bytes, args.partitions)
        baseline = await run_case(root / "baseline", args.baseline_writers, *common, False)
        cases = [await run_case(root / f"w{w}", w, *common, True) for w in writer_counts]
    base_rate = baseline["appends_per_s"]
    ratios = {str(c["writers"]): round(c["appends_per_s"] / base_rate, 2) for c in cases}
    top = max(writer_counts)
    print(
        json.dumps(
            {
                "benchmark": "eventlog_append",
                "backend": "FileEventLog",
                "fsync": "always",
                "value_bytes": args.value_bytes,
                "partitions": args.partitions,
                "machine": machine(),
                "baseline_one_fsync_per_append": baseline,
                "group_commit": cases,
                "ratio_vs_baseline": ratios,
                "target": {"writers": top, "min_ratio": 10, "met": ratios[str(top)] >= 10},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
