"""Benchmark: segment offload to S3 through S3RemoteStorageManager vs plain boto3.

Starts moto's ThreadedMotoServer on a free loopback port, writes N segment-sized files
(default 4 x 64 MiB), and uploads each one twice, interleaved: through
``S3RemoteStorageManager.copy_log_segment_data`` (write-once, CRC-32C, parallel
multipart; the five indexes are small files uploaded alongside), through plain
``client.upload_file`` of the .log with boto3's default TransferConfig, and through
upload_file of all six objects one after another (the same work as the RSM's). MB/s
count the .log bytes only. Then fetches a 1 MiB range
of a 64 MiB object ~20 times each way (RSM ``fetch_log_segment`` vs one ranged
``get_object``). Prints one JSON document: MB/s and p50 per side and their ratios
(targets: upload ratio >= 1.0, fetch ratio <= 2.0). Both sides share the machine and
the server in the same run, so ratios matter more than absolute numbers.

Usage: python bench/offload_s3.py [--files 4] [--rounds 3] [--size-mib 64] [--tries 20]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._machine import cpu_model  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402

MiB = 1024 * 1024
BUCKET = "rlmm-bench"


def write_file(path: Path, size: int, rnd: random.Random) -> None:
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(8 * MiB, left)
            f.write(rnd.randbytes(n))
            left -= n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4, help="segments to upload each way")
    parser.add_argument("--size-mib", type=int, default=64, help="segment size")
    parser.add_argument("--rounds", type=int, default=3, help="upload every file this often")
    parser.add_argument("--tries", type=int, default=20, help="ranged fetches each way")
    parser.add_argument("--range-mib", type=float, default=1.0, help="fetched range size")
    parser.add_argument("--part-size-mib", type=int, default=8)
    parser.add_argument("--multipart-threshold-mib", type=int, default=16)
    parser.add_argument("--max-concurrency", type=int, default=8)
    args = parser.parse_args()

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

    import boto3
    from moto.server import ThreadedMotoServer

    # The server's per-request access log would drown the JSON on the terminal.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    from remote import LogSegmentData
    from remote.s3 import S3RemoteStorageManager
    from tests.remote.conftest import make_metadata

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    size = args.size_mib * MiB
    rnd = random.Random(405)
    try:
        plain = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        plain.create_bucket(Bucket=BUCKET)
        rsm = S3RemoteStorageManager(
            BUCKET,
            "bench",
            endpoint_url=endpoint,
            region="us-east-1",
            part_size=args.part_size_mib * MiB,
            multipart_threshold=args.multipart_threshold_mib * MiB,
            max_concurrency=args.max_concurrency,
        )
        with tempfile.TemporaryDirectory(prefix="rlmm-bench-") as tmp:
            d = Path(tmp)
            small = {}
            for ext in ("index", "timeindex", "snapshot", "txnindex"):
                small[ext] = d / f"segment.{ext}"
                write_file(small[ext], 4096, rnd)
            logs = []
            for i in range(args.files):
                logs.append(d / f"{i:020d}.log")
                write_file(logs[-1], size, rnd)

            rsm_times: list[float] = []
            plain_times: list[float] = []
            segment_times: list[float] = []
            kept = None
            jobs = [(r, i, p) for r in range(args.rounds) for i, p in enumerate(logs)]
            for n, (r, i, log_path) in enumerate(jobs):
                metadata = make_metadata(start_offset=(r * len(logs) + i) * 1000, size=size)
                data = LogSegmentData(
                    log_path,
                    small["index"],
                    small["timeindex"],
                    small["txnindex"],
                    small["snapshot"],
                    b"0\n1\n0 0\n",
                )
                plain_key = f"plain/{uuid.uuid4()}.log"

                def run_rsm(metadata: Any = metadata, data: LogSegmentData = data) -> None:
                    t = time.perf_counter()
                    rsm.copy_log_segment_data(metadata, data)
                    rsm_times.append(time.perf_counter() - t)

                def run_plain(log_path: Path = log_path, key: str = plain_key) -> None:
                    t = time.perf_counter()
                    plain.upload_file(str(log_path), BUCKET, key)
                    plain_times.append(time.perf_counter() - t)

                def run_plain_segment(data: LogSegmentData = data, key: str = plain_key) -> None:
                    # The same six objects the RSM writes, one upload_file after another.
                    t = time.perf_counter()
                    for path in (data.log_segment, *(small[e] for e in sorted(small))):
                        plain.upload_file(str(path), BUCKET, f"{key}.all{path.suffix}")
                    plain.upload_fileobj(io.BytesIO(data.leader_epoch_index), BUCKET, key + ".lec")
                    segment_times.append(time.perf_counter() - t)

                # Interleave, rotating who goes first, to spread the machine's noise.
                runs: list[Callable[[], None]] = [run_rsm, run_plain, run_plain_segment]
                for run in runs[n % 3 :] + runs[: n % 3]:
                    run()
                leftovers = plain.list_objects_v2(Bucket=BUCKET, Prefix="plain/")
                plain.delete_objects(
                    Bucket=BUCKET,
                    Delete={"Objects": [{"Key": o["Key"]} for o in leftovers["Contents"]]},
                )
                if n < len(jobs) - 1:
                    rsm.delete_log_segment_data(metadata)
                else:
                    kept = metadata

            # Ranged fetches of the last segment, the same random ranges both ways.
            assert kept is not None
            length = int(args.range_mib * MiB)
            key = rsm.key_of(kept, None)
            rsm_fetch: list[float] = []
            plain_fetch: list[float] = []
            for i in range(args.tries):
                start = rnd.randrange(0, size - length)
                end = start + length - 1

                def fetch_rsm(start: int = start, end: int = end) -> bytes:
                    t = time.perf_counter()
                    with rsm.fetch_log_segment(kept, start, end) as stream:
                        got = stream.read()
                    rsm_fetch.append(time.perf_counter() - t)
                    return got

                def fetch_plain(start: int = start, end: int = end) -> bytes:
                    t = time.perf_counter()
                    got = plain.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end}")[
                        "Body"
                    ].read()
                    plain_fetch.append(time.perf_counter() - t)
                    return got

                order = (fetch_rsm, fetch_plain) if i % 2 == 0 else (fetch_plain, fetch_rsm)
                results = [f() for f in order]
                assert results[0] == results[1] and len(results[0]) == length
            rsm.delete_log_segment_data(kept)
        rsm.close()
        plain.close()
    finally:
        server.stop()

    total = size * args.files * args.rounds / 1e6
    rsm_mbps = total / sum(rsm_times)
    plain_mbps = total / sum(plain_times)
    segment_mbps = total / sum(segment_times)
    rsm_p50 = statistics.median(rsm_fetch)
    plain_p50 = statistics.median(plain_fetch)
    report = {
        "benchmark": "offload_s3",
        "machine": {
            "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "server": "moto ThreadedMotoServer, 127.0.0.1 (same process)",
        "params": {
            "files": args.files,
            "rounds": args.rounds,
            "size_mib": args.size_mib,
            "rsm_part_size_mib": args.part_size_mib,
            "rsm_multipart_threshold_mib": args.multipart_threshold_mib,
            "rsm_max_concurrency": args.max_concurrency,
            "plain": "boto3 client.upload_file of the .log, default TransferConfig",
            "plain_segment": "upload_file of the same 6 objects the RSM writes, in sequence",
            "rsm_extra_objects": "5 small index objects (4 KiB) per copy, counted in its time",
            "fetch_range_mib": args.range_mib,
            "fetch_tries": args.tries,
        },
        "upload": {
            "rsm_mb_per_s": round(rsm_mbps, 1),
            "plain_mb_per_s": round(plain_mbps, 1),
            "ratio_rsm_over_plain": round(rsm_mbps / plain_mbps, 3),
            # Each RSM upload against the plain upload right next to it in time.
            "median_pairwise_ratio": round(
                statistics.median(p / r for r, p in zip(rsm_times, plain_times, strict=True)), 3
            ),
            "target_ratio_min": 1.0,
            "plain_segment_mb_per_s": round(segment_mbps, 1),
            "ratio_rsm_over_plain_segment": round(rsm_mbps / segment_mbps, 3),
            "rsm_seconds": [round(t, 3) for t in rsm_times],
            "plain_seconds": [round(t, 3) for t in plain_times],
        },
        "fetch_range": {
            "rsm_p50_ms": round(rsm_p50 * 1000, 2),
            "plain_p50_ms": round(plain_p50 * 1000, 2),
            "ratio_rsm_over_plain": round(rsm_p50 / plain_p50, 3),
            "target_ratio_max": 2.0,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
