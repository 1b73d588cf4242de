"""Benchmark: the archive reader (remote segment -> Arrow) against kafka-python, as JSON.

Writes a partition of ``--records`` records (100-byte values, key = the record number,
no headers, batches of ``--batch-records``) uncompressed and zstd with
remote.segments.PartitionDirWriter, copies its segments to local remote storage through the
manager (STARTED -> copy -> FINISHED, the archive tests' helper), then measures on one core, best of
``--repeat`` runs:
- archive: open_metadata_view + plan_slices + read_slice of every slice into Arrow
  RecordBatches (Spark's Kafka schema), records/s and MB/s of segment bytes;
- kafka-python: its own decoder over the same segment files, as its consumer decodes
  a fetch (MemoryRecords, each batch's CRC, every record's offset, timestamp, key,
  value, headers), the baseline, on the first ``--baseline-records`` records only.
Targets: archive >= 1M records/s per core uncompressed; archive >= 10x kafka-python.

``build_archive()`` is reusable by other benches (bench/spark_read.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine
from remote.segments import PartitionDir, PartitionDirWriter, ProducerRecord
from rlmm.archive import ReadRequest, close_remote_storage, open_metadata_view, plan_slices
from rlmm.archive.reader import read_slice
from rlmm.config import RlmmConfig
from tests.rlmm.archive.archive_data import make_config, offload

# kafka-python imports its whole client, which warns on import: imported once, quietly,
# and not inside a timed run.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

MB = 1 << 20


def write_partition(
    parent: Path, topic: str, records: int, codec: str, batch_records: int, segment_mb: int
) -> PartitionDir:
    value = b"v" * 100
    with PartitionDirWriter(
        parent, topic, 0, compression=codec, segment_bytes=segment_mb * MB
    ) as w:
        for start in range(0, records, batch_records):
            n = min(batch_records, records - start)
            w.append_batch(
                [
                    ProducerRecord(str(i).encode(), value, (), 1_700_000_000_000 + i)
                    for i in range(start, start + n)
                ]
            )
    return PartitionDir(parent / f"{topic}-0")


def build_archive(
    root: Path,
    records: int,
    codecs: tuple[str, ...] = ("none", "zstd"),
    *,
    batch_records: int = 500,
    segment_mb: int = 64,
    remote: dict[str, Any] | None = None,
) -> RlmmConfig:
    """An archive under ``root``: topic ``bench-<codec>`` partition 0 per codec."""
    overrides = {f"remote.{key}": value for key, value in (remote or {}).items()}
    config = make_config(root / "rlmm", **overrides)
    pdirs = [
        write_partition(root / "logs", f"bench-{c}", records, c, batch_records, segment_mb)
        for c in codecs
    ]
    # The writer is closed: every segment is complete, the last one too.
    asyncio.run(offload(config, pdirs, skip_active=False))
    return config


def archive_segment_bytes(config: RlmmConfig, topic: str) -> int:
    with open_metadata_view(config) as view:
        tp = view.find(topic, 0)
        assert tp is not None
        return sum(m.segment_size_in_bytes for m in view.lineage(tp))


def read_archive(config: RlmmConfig, topic: str) -> int:
    """Rows read by the archive reader for the whole topic (plan + read every slice)."""
    with open_metadata_view(config) as view:
        slices = plan_slices(view, ReadRequest(topics=(topic,)), config.remote_options())
    return sum(batch.num_rows for piece in slices for batch in read_slice(piece))


def read_kafka_python(paths: list[Path], limit: int) -> int:
    n = 0
    for path in paths:
        records = MemoryRecords(path.read_bytes())
        while (batch := records.next_batch()) is not None:
            # As kafka-python's consumer does (check_crcs=True), as our reader does.
            if not batch.validate_crc():
                raise AssertionError(f"{path}: CRC mismatch")
            for r in batch:
                _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
                n += 1
            if n >= limit:
                return n
    return n


def best(repeat: int, run: Any) -> tuple[float, float, int]:
    """(best CPU seconds, best wall seconds, count): CPU time gives the per-core figure
    on a shared machine; nothing here runs on more than one thread."""
    cpu, wall, count = [], [], 0
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        count = run()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--baseline-records", type=int, default=300_000)
    parser.add_argument("--batch-records", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, Any] = {
        "bench": "archive_read",
        "machine": machine(),
        "records": args.records,
        "value_bytes": 100,
        "batch_records": args.batch_records,
        "targets": {"archive_records_per_s_uncompressed": 1_000_000, "ratio_vs_kafka_python": 10},
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="archive-bench-") as tmp:
        root = Path(tmp)
        config = build_archive(root, args.records, batch_records=args.batch_records)
        for codec in ("none", "zstd"):
            topic = f"bench-{codec}"
            size = archive_segment_bytes(config, topic)
            paths = [s.log_path for s in PartitionDir(root / "logs" / f"{topic}-0").segments()]
            # Interleaved, so that both see the same load on a shared machine.
            cpu, wall, rows = float("inf"), float("inf"), 0
            base_cpu, base_wall, base_rows = float("inf"), float("inf"), 0
            for _ in range(args.repeat):
                c, w, rows = best(1, lambda t=topic: read_archive(config, t))
                cpu, wall = min(cpu, c), min(wall, w)
                c, w, base_rows = best(
                    1, lambda p=paths: read_kafka_python(p, args.baseline_records)
                )
                base_cpu, base_wall = min(base_cpu, c), min(base_wall, w)
            archive_rps = rows / cpu
            baseline_rps = base_rows / base_cpu
            out["results"][codec] = {
                "segment_mb": round(size / MB, 1),
                "archive_rows": rows,
                "archive_records_per_s_per_core": round(archive_rps),
                "archive_mb_per_s_per_core": round(size / cpu / MB, 1),
                "archive_records_per_s_wall": round(rows / wall),
                "kafka_python_rows": base_rows,
                "kafka_python_records_per_s_per_core": round(baseline_rps),
                "kafka_python_records_per_s_wall": round(base_rows / base_wall),
                "ratio_vs_kafka_python": round(archive_rps / baseline_rps, 2),
            }
    close_remote_storage()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
