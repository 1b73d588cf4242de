"""Benchmark: KafkaEventLog appends, replay and end offsets on a real broker (Tansu).

Same-run baselines, because absolute numbers depend on the broker and the noisy
shared machine:
- appends: KafkaEventLog with 1, 64 and 256 concurrent writers, against a raw
  aiokafka producer (acks=all, same linger) driven by 256 writers. The ratios that
  matter are ``appends_per_s(256) / appends_per_s(1)`` (producer batching works)
  and ``ours(256) / raw(256)`` (wrapper overhead, ~1 is good).
- replay: records/s through the shared fan-out consumer vs a raw AIOKafkaConsumer
  reading the same partition.
- end_offsets over 50 partitions (one ListOffsets + one Fetch per broker): latency.

Prints ONE JSON document. Starts a Tansu broker on memory storage unless
``--bootstrap`` is given. Usage:
  python bench/kafka_eventlog.py [--seconds 2] [--writers 1,64,256] [--records 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench._machine import machine
from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from tests.fixtures.kafka import TansuBroker

VALUE = b"x" * 100


async def bench_appends(bootstrap: str, writers: int, seconds: float) -> dict[str, Any]:
    log = KafkaEventLog(
        bootstrap, 4, KafkaLogSettings(topic=f"bench-{uuid4().hex[:8]}", replication_factor=1)
    )
    async with log:
        deadline = time.perf_counter() + seconds

        async def writer(w: int) -> int:
            done = 0
            while time.perf_counter() < deadline:
                await log.append(w % 4, VALUE)
                done += 1
            return done

        started = time.perf_counter()
        total = sum(await asyncio.gather(*(writer(w) for w in range(writers))))
        elapsed = time.perf_counter() - started
    return {"writers": writers, "appends": total, "appends_per_s": round(total / elapsed, 1)}


async def bench_raw_producer(bootstrap: str, writers: int, seconds: float) -> dict[str, Any]:
    log = KafkaEventLog(
        bootstrap, 4, KafkaLogSettings(topic=f"bench-{uuid4().hex[:8]}", replication_factor=1)
    )
    async with log:  # only to create the topic the same way
        topic = log.topic
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        deadline = time.perf_counter() + seconds

        async def writer(w: int) -> int:
            done = 0
            while time.perf_counter() < deadline:
                await (await producer.send(topic, VALUE, partition=w % 4))
                done += 1
            return done

        started = time.perf_counter()
        total = sum(await asyncio.gather(*(writer(w) for w in range(writers))))
        elapsed = time.perf_counter() - started
    finally:
        await producer.stop()
    return {"writers": writers, "appends": total, "appends_per_s": round(total / elapsed, 1)}


async def bench_replay(bootstrap: str, records: int) -> dict[str, Any]:
    log = KafkaEventLog(
        bootstrap, 50, KafkaLogSettings(topic=f"bench-{uuid4().hex[:8]}", replication_factor=1)
    )
    async with log:
        for start in range(0, records, 500):
            await log.append_batch(0, [VALUE] * min(500, records - start))
        started = time.perf_counter()
        got = 0
        async for batch in log.read_batches(0, 0):
            got += len(batch)
            if got >= records:
                break
        ours = time.perf_counter() - started

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = TopicPartition(log.topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            started = time.perf_counter()
            raw_got = 0
            while raw_got < records:
                data = await consumer.getmany(tp, timeout_ms=1000)
                raw_got += len(data.get(tp, []))
            raw = time.perf_counter() - started
        finally:
            await consumer.stop()

        latencies = []
        for _ in range(20):
            t0 = time.perf_counter()
            offsets = await log.end_offsets(range(50))
            latencies.append(time.perf_counter() - t0)
        assert offsets[0] == records, offsets[0]
    latencies.sort()
    return {
        "records": records,
        "ours_records_per_s": round(records / ours, 1),
        "raw_consumer_records_per_s": round(records / raw, 1),
        "ratio_ours_vs_raw": round(raw / ours, 3),
        "end_offsets_50_partitions_ms_p50": round(latencies[len(latencies) // 2] * 1000, 2),
        "end_offsets_50_partitions_ms_max": round(latencies[-1] * 1000, 2),
    }


async def main_async(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    writers = [int(w) for w in args.writers.split(",")]
    appends = [await bench_appends(bootstrap, w, args.seconds) for w in writers]
    raw = await bench_raw_producer(bootstrap, max(writers), args.seconds)
    by_writers = {a["writers"]: a["appends_per_s"] for a in appends}
    top = max(writers)
    return {
        "appends": appends,
        "raw_producer": raw,
        "ratio_top_writers_vs_1": round(by_writers[top] / by_writers[min(writers)], 2),
        "ratio_ours_vs_raw_producer": round(by_writers[top] / raw["appends_per_s"], 3),
        "replay": await bench_replay(bootstrap, args.records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--writers", default="1,64,256")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--bootstrap", default=None, help="external Kafka (default: start Tansu)")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = TansuBroker("memory://tansu/")
        broker.start()
        bootstrap = broker.bootstrap
    try:
        results = asyncio.run(main_async(args, bootstrap))
    finally:
        if broker is not None:
            broker.stop()
            broker.log_path.unlink(missing_ok=True)
    print(
        json.dumps(
            {
                "benchmark": "kafka_eventlog",
                "broker": "external" if args.bootstrap else "tansu memory://",
                "machine": machine(),
                "params": vars(args),
                **results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
