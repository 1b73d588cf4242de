"""Benchmark: scanning a Kafka segment with remote.segments (prints one JSON document).

Generates an uncompressed segment with PartitionDirWriter in a temp dir (256 MiB by
default, ``--size-mb``), then measures, each best of ``--repeat`` runs:
- baseline: raw sequential read of the file in the reader's chunk size (MB/s);
- header-only batch iteration (CRC off), the offloader's path;
- header iteration with CRC-32C verification;
- full record decoding (aiokafka), on the first ``--decode-mb`` MiB only (slow path).
Ratios against the baseline measured in the same run are what count: the machine is
shared and noisy. Target: header-only ≥ 500 MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import cpu_model
from remote.segments import (
    PartitionDirWriter,
    ProducerRecord,
    RecordBatchReader,
    decode_batch,
)
from remote.segments.batch import DEFAULT_CHUNK_SIZE

MB = 1 << 20


def _generate(parent: Path, size_mb: int, batch_records: int, value_size: int) -> Path:
    target = size_mb * MB
    with PartitionDirWriter(parent, "bench", 0, segment_bytes=target + 16 * MB) as w:
        n = 0
        value = b"v" * value_size
        while w.active_segment_size < target:  # one segment, filled to the requested size
            batch = [
                ProducerRecord(
                    str(n + i).encode(), value, (("h", b"1"),), 1_700_000_000_000 + n + i
                )
                for i in range(batch_records)
            ]
            w.append_batch(batch)
            n += batch_records
    return parent / "bench-0" / f"{0:020d}.log"


def _best(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    best, result = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--decode-mb", type=int, default=16)
    ap.add_argument("--batch-records", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="segment-scan-") as tmp:
        t0 = time.perf_counter()
        log = _generate(Path(tmp), args.size_mb, args.batch_records, args.value_size)
        gen_s = time.perf_counter() - t0
        size = log.stat().st_size

        def raw_read() -> int:
            total = 0
            with open(log, "rb") as f:
                while chunk := f.read(DEFAULT_CHUNK_SIZE):
                    total += len(chunk)
            return total

        def headers(verify: bool) -> Callable[[], int]:
            def run() -> int:
                reader = RecordBatchReader(log, verify_crc=verify)
                count = sum(1 for _ in reader)
                assert reader.valid_bytes == size
                return count

            return run

        decode_limit = min(size, args.decode_mb * MB)
        decode_state = {"bytes": 0}

        def decode() -> int:
            records = 0
            consumed = 0
            for header, data in RecordBatchReader(log, verify_crc=True).batches():
                records += len(decode_batch(header, data))
                consumed = header.end_position
                if consumed >= decode_limit:
                    break
            decode_state["bytes"] = consumed
            return records

        raw_s, _ = _best(args.repeat, raw_read)
        hdr_s, batches = _best(args.repeat, headers(False))
        crc_s, _ = _best(args.repeat, headers(True))
        dec_s, records = _best(max(1, args.repeat - 1), decode)
        dec_bytes = decode_state["bytes"]

    def rate(nbytes: int, seconds: float) -> float:
        return round(nbytes / MB / seconds, 1)

    raw_mbs = rate(size, raw_s)
    result = {
        "benchmark": "segment_scan",
        "machine": {
            "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "params": {
            "size_mb": args.size_mb,
            "segment_bytes": size,
            "batches": batches,
            "batch_records": args.batch_records,
            "value_size": args.value_size,
            "repeat": args.repeat,
            "chunk_size": DEFAULT_CHUNK_SIZE,
            "generate_seconds": round(gen_s, 2),
        },
        "baseline_raw_read": {"seconds": round(raw_s, 4), "mb_per_s": raw_mbs},
        "header_only": {
            "seconds": round(hdr_s, 4),
            "mb_per_s": rate(size, hdr_s),
            "batches_per_s": round(batches / hdr_s),
            "ratio_to_raw_read": round(rate(size, hdr_s) / raw_mbs, 3),
        },
        "header_with_crc": {
            "seconds": round(crc_s, 4),
            "mb_per_s": rate(size, crc_s),
            "batches_per_s": round(batches / crc_s),
            "ratio_to_raw_read": round(rate(size, crc_s) / raw_mbs, 3),
        },
        "full_decode": {
            "bytes": dec_bytes,
            "seconds": round(dec_s, 4),
            "mb_per_s": rate(dec_bytes, dec_s),
            "records_per_s": round(records / dec_s),
            "ratio_to_raw_read": round(rate(dec_bytes, dec_s) / raw_mbs, 3),
        },
        "target_header_only_mb_per_s": 500,
        "target_met": rate(size, hdr_s) >= 500,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
