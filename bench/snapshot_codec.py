"""Benchmark: encode/decode/write/load of a snapshot of N cached segments (default 1M).

Prints one JSON document: machine info, body size, best-of-R timings of
encode_snapshot / decode_snapshot / SnapshotStore.write / load_latest, the same for
plain msgpack.packb/unpackb of the same state measured in the same run (the
baseline; ratios are what count on a noisy machine), and the peak RSS each of encode_snapshot and
SnapshotStore.write adds, in copies of the body (measured in fresh subprocesses).

Usage: python bench/snapshot_codec.py [--segments 1000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import cpu_model
from snapshot import Snapshot, SnapshotStore, decode_snapshot, encode_snapshot


def cache_state(segments: int) -> list[list[Any]]:
    """What an RLMM cache could snapshot per segment: offsets, times, id, state, epochs."""
    return [
        [
            i * 4096,  # start_offset
            i * 4096 + 4095,  # end_offset
            1_700_000_000_000 + i,  # max_timestamp_ms
            (i % 65536).to_bytes(2, "big") * 8,  # segment uuid (16 bytes)
            1,  # state COPY_SEGMENT_FINISHED
            1_073_741_824,  # segment_size_in_bytes
            [[0, i * 4096]],  # segment_leader_epochs
            None,  # custom_metadata
            False,  # txn_index_empty
        ]
        for i in range(segments)
    ]


def make_snapshot(segments: int) -> Snapshot:
    return Snapshot(
        partition_count=50,
        applied_offsets={p: 1_000_000 + p for p in range(50)},
        state=cache_state(segments),
        created_ms=int(time.time() * 1000),
    )


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times), 4)


def max_rss_bytes() -> int:
    # VmHWM belongs to this process image; ru_maxrss survives exec on Linux and
    # would report the (much bigger) parent's peak in a child process.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def measure_rss(what: str, segments: int) -> None:
    """Child mode: peak RSS added by one operation, printed as JSON."""
    snap = make_snapshot(segments)
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(tmp, keep=2)
        # Building the state only grew the heap, so the high-water mark is "now".
        before = max_rss_bytes()
        if what == "encode":
            file_bytes = len(encode_snapshot(snap))
        else:
            file_bytes = store.write(snap).stat().st_size
        added = max_rss_bytes() - before
    print(json.dumps({"added_bytes": added, "file_bytes": file_bytes}))


def rss_copies(what: str, segments: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--measure-rss", what, "--segments", str(segments)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(out)
    return round(result["added_bytes"] / result["file_bytes"], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--measure-rss", choices=["encode", "write"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_rss:
        measure_rss(args.measure_rss, args.segments)
        return

    snap = make_snapshot(args.segments)
    data = encode_snapshot(snap)
    packed = msgpack.packb(snap.state)
    assert decode_snapshot(data) == snap
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(tmp, keep=2)
        write_s = best_of(args.repeat, lambda: store.write(snap))
        load_s = best_of(args.repeat, store.load_latest)
    encode_s = best_of(args.repeat, lambda: encode_snapshot(snap))
    decode_s = best_of(args.repeat, lambda: decode_snapshot(data))
    packb_s = best_of(args.repeat, lambda: msgpack.packb(snap.state))
    unpackb_s = best_of(args.repeat, lambda: msgpack.unpackb(packed))

    print(
        json.dumps(
            {
                "benchmark": "snapshot_codec",
                "machine": {
                    "cpu_count": os.cpu_count(),
                    "cpu_model": cpu_model(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
                "segments": args.segments,
                "repeat": args.repeat,
                "file_bytes": len(data),
                "seconds": {
                    "encode_snapshot": encode_s,
                    "decode_snapshot": decode_s,
                    "store_write": write_s,
                    "store_load_latest": load_s,
                    "baseline_msgpack_packb": packb_s,
                    "baseline_msgpack_unpackb": unpackb_s,
                },
                "ratios": {
                    "encode_vs_packb": round(encode_s / packb_s, 2),
                    "decode_vs_unpackb": round(decode_s / unpackb_s, 2),
                },
                "peak_rss_added_in_body_copies": {
                    "encode_snapshot": rss_copies("encode", args.segments),
                    "store_write": rss_copies("write", args.segments),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
