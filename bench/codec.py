"""Benchmark: rlmm.codec encode/decode throughput on one core, against msgpack in the same run.

Prints one JSON document. Events are realistic: segment adds with 1-3 leader epochs,
~50 bytes of custom metadata on a third of them, and segment state updates. The baseline
is msgpack.packb/unpackb of an equivalent plain dict (no model objects built), measured
in the same process on the same corpus, so the ratio survives a noisy machine. Each
figure is the best of ``--repeat`` passes (least disturbed by other load).

    python bench/codec.py [--events 20000] [--repeat 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import cpu_model
from rlmm.codec import FAST_BUILD, FAST_UUID, decode, encode
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TARGET_ROUND_TRIPS_PER_S = 100_000


def make_corpus(
    n: int, rng: random.Random
) -> tuple[list[RemoteLogSegmentMetadata], list[RemoteLogSegmentMetadataUpdate]]:
    topics = [
        TopicIdPartition(uuid.UUID(int=rng.getrandbits(128)), f"orders-{t}", p)
        for t in range(20)
        for p in range(12)
    ]
    segments: list[RemoteLogSegmentMetadata] = []
    updates: list[RemoteLogSegmentMetadataUpdate] = []
    now = 1_700_000_000_000
    for i in range(n):
        tp = rng.choice(topics)
        start = rng.randrange(0, 10**12)
        end = start + rng.randrange(1, 10**6)
        first_epoch = rng.randrange(0, 100)
        n_epochs = rng.choice((1, 1, 2, 3))
        epoch_starts = sorted(rng.sample(range(start, end + 1), n_epochs))
        epoch_starts[0] = start
        epochs = {first_epoch + k: off for k, off in enumerate(epoch_starts)}
        custom = rng.randbytes(rng.randrange(40, 60)) if rng.random() < 1 / 3 else None
        seg = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, uuid.UUID(int=rng.getrandbits(128))),
            start,
            end,
            max_timestamp_ms=now + i,
            broker_id=rng.randrange(0, 6),
            event_timestamp_ms=now + i,
            segment_size_in_bytes=rng.randrange(1 << 20, 1 << 30),
            segment_leader_epochs=epochs,
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            custom_metadata=custom,
            txn_index_empty=rng.random() < 0.9,
        )
        segments.append(seg)
        updates.append(
            RemoteLogSegmentMetadataUpdate(
                seg.remote_log_segment_id,
                now + i + 1,
                custom,
                rng.choice(
                    (
                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
                    )
                ),
                seg.broker_id,
            )
        )
    return segments, updates


def as_plain_dict(event: RemoteLogMetadata) -> dict[str, Any]:
    """The same information as a msgpack-friendly dict (the baseline's payload)."""
    if isinstance(event, RemoteLogSegmentMetadata):
        sid = event.remote_log_segment_id
        return {
            "topic": sid.topic_id_partition.topic,
            "topic_id": sid.topic_id_partition.topic_id.bytes,
            "partition": sid.topic_id_partition.partition,
            "id": sid.id.bytes,
            "start_offset": event.start_offset,
            "end_offset": event.end_offset,
            "broker_id": event.broker_id,
            "max_timestamp_ms": event.max_timestamp_ms,
            "event_timestamp_ms": event.event_timestamp_ms,
            "segment_leader_epochs": list(event.segment_leader_epochs.items()),
            "segment_size_in_bytes": event.segment_size_in_bytes,
            "custom_metadata": event.custom_metadata,
            "state": int(event.state),
            "txn_index_empty": event.txn_index_empty,
        }
    assert isinstance(event, RemoteLogSegmentMetadataUpdate)
    sid = event.remote_log_segment_id
    return {
        "topic": sid.topic_id_partition.topic,
        "topic_id": sid.topic_id_partition.topic_id.bytes,
        "partition": sid.topic_id_partition.partition,
        "id": sid.id.bytes,
        "broker_id": event.broker_id,
        "event_timestamp_ms": event.event_timestamp_ms,
        "custom_metadata": event.custom_metadata,
        "state": int(event.state),
    }


def best_rate(fn: Callable[[], object], n: int, repeat: int) -> dict[str, float]:
    """Events/s of ``fn`` (which processes n events) over ``repeat`` passes.

    ``cpu_*`` divide by this process's CPU time (what one core delivers, even when other
    processes compete for it); ``wall_*`` by elapsed time. Best = least disturbed pass.
    """
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(repeat):
        gc.collect()
        c0 = time.process_time()
        w0 = time.perf_counter()
        out = fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
        del out  # freed outside the timed region
    return {
        "cpu_best_events_per_s": round(n / min(cpu)),
        "cpu_median_events_per_s": round(n / statistics.median(cpu)),
        "wall_best_events_per_s": round(n / min(wall)),
    }


def measure(events: Sequence[RemoteLogMetadata], repeat: int) -> dict[str, Any]:
    n = len(events)
    encoded = [encode(e) for e in events]
    # Correctness before speed: every event survives the round trip unchanged.
    for event, data in zip(events, encoded, strict=True):
        back = decode(data)
        assert back == event and repr(back) == repr(event), event
    plain = [as_plain_dict(e) for e in events]
    packed = [msgpack.packb(d) for d in plain]

    # Timed loops discard their results, as an apply loop that consumes each event does;
    # the "decode_retained" figures keep every decoded event alive (as a cache would), which
    # adds the cycle collector's cost of tracking the new objects.
    def enc() -> None:
        for e in events:
            encode(e)

    def dec() -> None:
        for b in encoded:
            decode(b)

    def round_trip() -> None:
        for e in events:
            decode(encode(e))

    def dec_retained() -> object:
        return [decode(b) for b in encoded]

    def mp_pack() -> None:
        for d in plain:
            msgpack.packb(d)

    def mp_unpack() -> None:
        for b in packed:
            msgpack.unpackb(b)

    def mp_round_trip() -> None:
        for d in plain:
            msgpack.unpackb(msgpack.packb(d))

    def mp_unpack_retained() -> object:
        return [msgpack.unpackb(b) for b in packed]

    # The corpus itself is long-lived: keep it out of the collector's scans (as
    # gc.freeze() would for a broker's startup state), so only per-event garbage counts.
    gc.collect()
    gc.freeze()
    try:
        result: dict[str, Any] = {
            "events": n,
            "mean_bytes_kafka_wire": round(sum(map(len, encoded)) / n, 1),
            "mean_bytes_msgpack_dict": round(sum(map(len, packed)) / n, 1),
            "codec": {
                "encode": best_rate(enc, n, repeat),
                "decode": best_rate(dec, n, repeat),
                "round_trip": best_rate(round_trip, n, repeat),
                "decode_retained": best_rate(dec_retained, n, repeat),
            },
            "baseline_msgpack_dict": {
                "pack": best_rate(mp_pack, n, repeat),
                "unpack": best_rate(mp_unpack, n, repeat),
                "round_trip": best_rate(mp_round_trip, n, repeat),
                "unpack_retained": best_rate(mp_unpack_retained, n, repeat),
            },
        }
    finally:
        gc.unfreeze()
    codec_rt = result["codec"]["round_trip"]["cpu_best_events_per_s"]
    mp_rt = result["baseline_msgpack_dict"]["round_trip"]["cpu_best_events_per_s"]
    result["round_trip_ratio_codec_vs_msgpack"] = round(codec_rt / mp_rt, 3)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per kind")
    parser.add_argument("--repeat", type=int, default=5, help="passes per figure (best wins)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.events <= 0 or args.repeat <= 0:
        parser.error("--events and --repeat must be positive")

    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    segments, updates = make_corpus(args.events, rng)
    seg = measure(segments, args.repeat)
    upd = measure(updates, args.repeat)
    seg_rt = seg["codec"]["round_trip"]["cpu_best_events_per_s"]
    doc = {
        "benchmark": "codec",
        "machine": {
            "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(),
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "threads_used": 1,
        },
        "params": {"events": args.events, "repeat": args.repeat, "seed": args.seed},
        "fast_paths": {"build": FAST_BUILD, "uuid": FAST_UUID},
        "segment_add": seg,
        "segment_update": upd,
        "target": {
            "segment_round_trips_per_s": TARGET_ROUND_TRIPS_PER_S,
            "met": seg_rt >= TARGET_ROUND_TRIPS_PER_S,
        },
        "wall_seconds": round(time.perf_counter() - t0, 2),
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
