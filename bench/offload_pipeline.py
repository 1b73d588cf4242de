"""Benchmark: the offload pipeline end to end vs plain file copies, in the same run.

Writes Kafka partition dirs (default 1 GiB over 16 partitions, 16 MiB segments, no
compression) with PartitionDirWriter, then offloads every rolled segment with
``RemoteLogManager.copy_round`` (file event log with fsync, snapshots, CRC-verified
segment scan, STARTED/FINISHED events) into (a) local remote storage and (b) a moto
S3 server on loopback (its own process, so its memory is not ours), and copies the
same files (log, indexes, producer snapshot) with plain ``shutil.copyfile`` / plain
boto3 ``upload_file`` at the same concurrency. Ratios are baseline time / pipeline
time (target >= 0.8 both ways). Also: metadata overhead per segment (the STARTED
and FINISHED writes, sequential, ms), the segment scan per segment (ms), and the
peak RSS of this process. Prints one JSON document.

Usage: python bench/offload_pipeline.py [--size-mib 1024] [--partitions 16] [--segment-mib 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._machine import machine  # noqa: E402
from remote.segment_data import log_segment_data  # noqa: E402
from remote.segments import PartitionDir, PartitionDirWriter, generate_records  # noqa: E402
from rlmm.config import load_config  # noqa: E402
from rlmm.factory import create_manager, open_event_log  # noqa: E402
from rlmm.model import (  # noqa: E402
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.offload import LogDirSource, RemoteLogManager, RetentionSettings  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402

MiB = 1024 * 1024
BUCKET = "rlmm-bench"
TARGET_RATIO = 0.8


def write_logs(logs: Path, size: int, partitions: int, segment: int) -> list[PartitionDir]:
    per_partition = size // partitions
    value = 16 * 1024
    records = max(1, per_partition // (value + 120))
    pdirs = []
    for p in range(partitions):
        with PartitionDirWriter(logs, "bench", p, segment_bytes=segment) as w:
            w.append_records(
                generate_records(records, value_size=value, headers=0), batch_records=16
            )
            # an active segment that stays local, as on a broker
            w.append_records(generate_records(1, start=records), batch_records=1)
        pdirs.append(PartitionDir(logs / f"bench-{p}"))
    return pdirs


def segment_files(pdirs: list[PartitionDir]) -> list[list[Path]]:
    """The files a copy moves, per rolled segment (what the baselines copy)."""
    out = []
    for pdir in pdirs:
        for seg in pdir.segments()[:-1]:
            data = log_segment_data(seg, seg.summary())
            files = [data.log_segment, data.offset_index, data.time_index]
            files.append(data.producer_snapshot_index)
            if data.transaction_index is not None:
                files.append(data.transaction_index)
            out.append(files)
    return out


def config_for(tmp: Path, remote: dict[str, Any], concurrency: int) -> Any:
    overrides: dict[str, Any] = {
        "data_dir": str(tmp),
        "eventlog.partitions": 8,
        "offload.remote.log.manager.copier.thread.pool.size": concurrency,
    }
    overrides.update({f"remote.{k}": v for k, v in remote.items()})
    return load_config(ROOT / "config" / "embedded.toml", env={}, overrides=overrides)


async def pipeline(
    config: Any, pdirs: list[PartitionDir], concurrency: int
) -> tuple[float, int, int, float]:
    """Seconds to offload every rolled segment; bytes; segments; metadata ms per segment."""
    from rlmm.factory import open_remote_storage

    manager = create_manager(config, open_event_log(config))
    rsm = open_remote_storage(config)
    await manager.start()
    rlm = RemoteLogManager(manager, rsm, copier_concurrency=concurrency)
    try:
        sources = [LogDirSource(p, RetentionSettings(retention_ms=-1)) for p in pdirs]
        await rlm.on_leadership_changes(sources, start_tasks=False)
        os.sync()  # no run pays for the write-back of an earlier one
        t0 = time.perf_counter()
        results = await asyncio.gather(*(rlm.copy_round(s.topic_id_partition) for s in sources))
        elapsed = time.perf_counter() - t0
        errors = [str(r.error) for r in results if r.error is not None]
        if errors:
            raise SystemExit(f"offload failed: {errors}")
        copied = sum(len(r.copied) for r in results)
        nbytes = sum(r.bytes for r in results)
        metadata_ms = await metadata_overhead(manager, copied)
    finally:
        await rlm.close()
        await manager.close()
        rsm.close()
    return elapsed, nbytes, copied, metadata_ms


async def metadata_overhead(manager: Any, n: int) -> float:
    """The two awaited metadata writes of a copy (STARTED, FINISHED), sequential, in ms."""
    import uuid

    tp = TopicIdPartition(uuid.uuid4(), "metadata-overhead", 0)
    await manager.on_partition_leadership_changes([tp], [])
    await manager.wait_until_ready([tp], 30)
    t0 = time.perf_counter()
    for i in range(n):
        m = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp), i * 100, i * 100 + 99, 1, 0, 1, 1000, {0: i * 100}
        )
        await manager.add_remote_log_segment_metadata(m)
        await manager.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                m.remote_log_segment_id,
                2,
                b"x" * 70,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                0,
            )
        )
    return (time.perf_counter() - t0) * 1000 / max(n, 1)


def scan_ms(pdirs: list[PartitionDir]) -> float:
    """The CRC-verified segment scan the log-dir source does before each copy, in ms."""
    segs = [s for p in pdirs for s in p.segments()[:-1]]
    t0 = time.perf_counter()
    for s in segs:
        s.summary(full_scan=True, verify_crc=True)
    return (time.perf_counter() - t0) * 1000 / max(len(segs), 1)


def parallel(concurrency: int, jobs: list[Any]) -> float:
    os.sync()  # no run pays for the write-back of an earlier one
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(job) for job in jobs]:
            f.result()
    return time.perf_counter() - t0


def copyfile_baseline(files: list[list[Path]], dest: Path, concurrency: int) -> float:
    def job(i: int, group: list[Path]) -> Any:
        def run() -> None:
            d = dest / str(i)
            d.mkdir(parents=True)
            for f in group:
                shutil.copyfile(f, d / f.name)

        return run

    return parallel(concurrency, [job(i, g) for i, g in enumerate(files)])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    moto = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(moto), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
            return proc, endpoint
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("moto server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    logging.getLogger("rlmm").setLevel(logging.WARNING)
    out: dict[str, Any] = {
        "benchmark": "offload_pipeline",
        "machine": machine(),
        "load_average": os.getloadavg(),
        "size_mib": args.size_mib,
        "partitions": args.partitions,
        "segment_mib": args.segment_mib,
        "concurrency": args.concurrency,
        "target_ratio": TARGET_RATIO,
    }
    with tempfile.TemporaryDirectory(prefix="rlmm-bench-", dir=ROOT / "bench") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        pdirs = write_logs(
            tmp / "logs", args.size_mib * MiB, args.partitions, args.segment_mib * MiB
        )
        out["write_logs_s"] = round(time.perf_counter() - t0, 2)
        files = segment_files(pdirs)
        out["segments"] = len(files)
        out["segment_scan_ms"] = round(scan_ms(pdirs), 2)

        base = copyfile_baseline(files, tmp / "copyfile", args.concurrency)
        config = config_for(tmp / "local", {"type": "local"}, args.concurrency)
        elapsed, nbytes, copied, meta_ms = asyncio.run(pipeline(config, pdirs, args.concurrency))
        shutil.rmtree(tmp / "local")
        # the same without fsync of the objects: what copyfile promises (page cache only)
        config = config_for(tmp / "local", {"type": "local", "fsync": False}, args.concurrency)
        unsynced, _, _, _ = asyncio.run(pipeline(config, pdirs, args.concurrency))
        out["local"] = {
            "pipeline_s": round(elapsed, 3),
            "copyfile_s": round(base, 3),
            "pipeline_mb_s": round(nbytes / elapsed / 1e6, 1),
            "copyfile_mb_s": round(nbytes / base / 1e6, 1),
            "ratio": round(base / elapsed, 3),
            "segments": copied,
            "metadata_ms_per_segment": round(meta_ms, 3),
            "meets_target": base / elapsed >= TARGET_RATIO,
            "pipeline_no_object_fsync_s": round(unsynced, 3),
            "ratio_no_object_fsync": round(base / unsynced, 3),
            "note": "the default pipeline fsyncs every object and the event log; copyfile does not",
        }
        shutil.rmtree(tmp / "copyfile")
        shutil.rmtree(tmp / "local" / "remote", ignore_errors=True)

        if not args.skip_s3:
            import boto3

            proc, endpoint = start_moto()
            try:
                client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
                client.create_bucket(Bucket=BUCKET)

                def upload(i: int, group: list[Path]) -> Any:
                    def run() -> None:
                        for f in group:
                            client.upload_file(str(f), BUCKET, f"plain/{i}/{f.name}")

                    return run

                base = parallel(args.concurrency, [upload(i, g) for i, g in enumerate(files)])
                urllib.request.urlopen(
                    urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30
                ).read()
                client.create_bucket(Bucket=BUCKET)
                s3 = {
                    "type": "s3",
                    "bucket": BUCKET,
                    "endpoint_url": endpoint,
                    "region": "us-east-1",
                }
                config = config_for(tmp / "s3", s3, args.concurrency)
                elapsed, nbytes, copied, meta_ms = asyncio.run(
                    pipeline(config, pdirs, args.concurrency)
                )
                out["s3"] = {
                    "pipeline_s": round(elapsed, 3),
                    "upload_file_s": round(base, 3),
                    "pipeline_mb_s": round(nbytes / elapsed / 1e6, 1),
                    "upload_file_mb_s": round(nbytes / base / 1e6, 1),
                    "ratio": round(base / elapsed, 3),
                    "segments": copied,
                    "metadata_ms_per_segment": round(meta_ms, 3),
                    "meets_target": base / elapsed >= TARGET_RATIO,
                }
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
