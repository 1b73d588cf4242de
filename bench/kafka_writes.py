"""Benchmark: acknowledged segment lifecycles/s through the manager on KafkaEventLog (Tansu).

A lifecycle is add COPY_SEGMENT_STARTED + update COPY_SEGMENT_FINISHED, each awaited:
a write returns once the manager's own apply loop has consumed it back from the
broker and applied it (read-your-writes), so its latency is produce + fetch + apply.
Measured with 1 and 64 concurrent writers (target: 64 >= 10x one writer), each for
each consumer ``fetch_max_wait_ms``: Tansu answers a long-polling fetch only when
that wait expires, not when a record arrives (real Kafka answers at once), so on
Tansu it sets the floor of a write's latency.

Same-run baseline: KafkaEventLog appends alone (produce acks=all, no apply loop)
with the same writer counts; ``apply_overhead`` = appends/s / writes/s.

Starts a Tansu broker on memory storage on a free loopback port (stopped at the end,
also on error) unless ``--bootstrap`` is given. Prints ONE JSON document. Usage:
  python bench/kafka_writes.py [--seconds 4] [--writers 1,64] [--fetch-max-wait 200,10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from eventlog.kafka import KafkaEventLog
from rlmm.codec import encode
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tests.fixtures.kafka import TansuBroker

PARTITIONS = 50  # Kafka's default remote.log.metadata.topic.num.partitions
WARMUP_S = 0.5


def new_log(bootstrap: str, fetch_max_wait_ms: int) -> KafkaEventLog:
    return KafkaEventLog(
        bootstrap,
        PARTITIONS,
        topic=f"bench-rlmm-{uuid.uuid4().hex[:8]}",
        replication_factor=1,
        consumer_config={"fetch_max_wait_ms": fetch_max_wait_ms},
    )


def started(tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), offset, offset + 999, 0, 1, 0, 1 << 30, {0: offset}
    )


def finished(m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
    )


def percentile_ms(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return round(sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))] * 1e3, 2)


async def bench_manager(
    bootstrap: str, writers: int, seconds: float, fetch_max_wait_ms: int
) -> dict[str, Any]:
    manager = TopicBasedRemoteLogMetadataManager(
        new_log(bootstrap, fetch_max_wait_ms), close_event_log=True
    )
    async with manager:
        tps = [TopicIdPartition(uuid.uuid4(), "bench", i) for i in range(max(writers, 8))]
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 60)
        write_latencies: list[float] = []
        lifecycle_latencies: list[float] = []
        done = 0
        measure_from = time.perf_counter() + WARMUP_S
        deadline = measure_from + seconds

        async def writer(i: int) -> None:
            nonlocal done
            tp = tps[i % len(tps)]
            offset = i * 10**12
            while (now := time.perf_counter()) < deadline:
                m = started(tp, offset)
                offset += 1000
                t0 = now
                await manager.add_remote_log_segment_metadata(m)
                t1 = time.perf_counter()
                await manager.update_remote_log_segment_metadata(finished(m))
                t2 = time.perf_counter()
                if t0 >= measure_from and t2 <= deadline:
                    write_latencies.extend((t1 - t0, t2 - t1))
                    lifecycle_latencies.append(t2 - t0)
                    done += 1

        await asyncio.gather(*(writer(i) for i in range(writers)))
        stats = manager.stats
        assert stats.skipped_invalid == stats.skipped_undecodable == 0, stats
    write_latencies.sort()
    lifecycle_latencies.sort()
    return {
        "writers": writers,
        "fetch_max_wait_ms": fetch_max_wait_ms,
        "lifecycles": done,
        "lifecycles_per_s": round(done / seconds, 1),
        "write_to_applied_ms_p50": percentile_ms(write_latencies, 0.50),
        "write_to_applied_ms_p99": percentile_ms(write_latencies, 0.99),
        "lifecycle_ms_p50": percentile_ms(lifecycle_latencies, 0.50),
        "lifecycle_ms_p99": percentile_ms(lifecycle_latencies, 0.99),
    }


async def bench_appends(bootstrap: str, writers: int, seconds: float) -> dict[str, Any]:
    """Baseline: the same encoded events appended with acks=all, no apply loop."""
    value = encode(started(TopicIdPartition(uuid.uuid4(), "bench", 0), 0))
    latencies: list[float] = []
    done = 0
    async with new_log(bootstrap, 200) as log:
        measure_from = time.perf_counter() + WARMUP_S
        deadline = measure_from + seconds

        async def writer(i: int) -> None:
            nonlocal done
            while (t0 := time.perf_counter()) < deadline:
                await log.append(i % PARTITIONS, value)
                t1 = time.perf_counter()
                if t0 >= measure_from and t1 <= deadline:
                    latencies.append(t1 - t0)
                    done += 1

        await asyncio.gather(*(writer(i) for i in range(writers)))
    latencies.sort()
    return {
        "writers": writers,
        "appends_per_s": round(done / seconds, 1),
        "append_ms_p50": percentile_ms(latencies, 0.50),
        "append_ms_p99": percentile_ms(latencies, 0.99),
    }


async def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    writer_counts = [int(w) for w in args.writers.split(",")]
    waits = [int(w) for w in args.fetch_max_wait.split(",")]
    low, high = min(writer_counts), max(writer_counts)
    baseline = {w: await bench_appends(bootstrap, w, args.baseline_seconds) for w in writer_counts}
    by_wait: dict[str, Any] = {}
    for wait in waits:
        runs = {w: await bench_manager(bootstrap, w, args.seconds, wait) for w in writer_counts}
        by_wait[f"fetch_max_wait_ms={wait}"] = {
            "runs": list(runs.values()),
            f"ratio_{high}_vs_{low}_writers": round(
                runs[high]["lifecycles_per_s"] / max(runs[low]["lifecycles_per_s"], 1e-9), 1
            ),
            # events/s the log alone takes vs events/s acknowledged through the manager
            f"apply_overhead_{high}_writers": round(
                baseline[high]["appends_per_s"] / max(2 * runs[high]["lifecycles_per_s"], 1e-9),
                2,
            ),
        }
    return {"baseline_appends": list(baseline.values()), "manager": by_wait}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per manager run")
    parser.add_argument("--baseline-seconds", type=float, default=2.0)
    parser.add_argument("--writers", default="1,64")
    parser.add_argument("--fetch-max-wait", default="200,10", help="consumer fetch_max_wait_ms")
    parser.add_argument("--bootstrap", default=None, help="external Kafka (default: start Tansu)")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    try:
        if bootstrap is None:
            broker = TansuBroker("memory://tansu/")
            broker.start()
            bootstrap = broker.bootstrap
        results = asyncio.run(run(args, bootstrap))
    finally:
        if broker is not None:
            broker.stop()
            broker.log_path.unlink(missing_ok=True)
    print(
        json.dumps(
            {
                "benchmark": "kafka_writes",
                "broker": "external" if args.bootstrap else "tansu memory://",
                "event_log": f"KafkaEventLog, {PARTITIONS} partitions, acks=all",
                "machine": machine(),
                "params": vars(args),
                **results,
                "targets": {"ratio_64_vs_1_writers": 10},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
