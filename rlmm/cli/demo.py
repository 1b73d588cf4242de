"""`make demo`: the real offloader end to end on Kafka-format log dirs, with real files.

Writes a Kafka log dir (two topics, five partitions, four codecs where installed, two
leader epochs, a committed and an aborted transaction), runs the `rlmm offload`
sidecar once into local remote storage (file event log, snapshots), checks byte for
byte that every copied object equals its local file, restarts the metadata manager
from its snapshot, and runs an expiration round that deletes what ``retention.bytes``
says. Then it says which segments retention expired and lists what remote storage
holds through ``rlmm segments list``'s own code (``show_segments``): the demo's table
is the command's, formats and count. Leaves ``demo-data/demo.toml`` (the config
every other tool can open the same metadata and store with) and
``demo-data/expected.json`` (what a reader of the archived segments must get).
Exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from remote.errors import RemoteResourceNotFoundError
from remote.naming import OBJECT_KINDS, kind_label, object_name
from remote.segment_data import log_segment_data
from remote.segments import (
    PartitionDir,
    PartitionDirWriter,
    available_codecs,
    generate_records,
    iter_records,
)
from remote.storage import RemoteStorageManager
from rlmm.cli.output import ConsoleOutput
from rlmm.cli.segments import show_segments
from rlmm.cli.units import human_bytes
from rlmm.config import load_config
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition, kafka_uuid_to_str
from rlmm.offload import OffloadSettings, RemoteLogManager, Victim, scan_log_dirs
from rlmm.offload.display import Display
from rlmm.offload.sidecar import run_sidecar

ROOT = Path(__file__).resolve().parents[2]
# Piped (make demo | tee): wide enough that no state or epoch is cut with an ellipsis.
console = Console(width=None if sys.stdout.isatty() else 160)

# topic -> [(partition, codec)]; codecs fall back to gzip where cramjam is missing
LAYOUT = {"orders": [(0, "gzip"), (1, "zstd"), (2, "none")], "clicks": [(0, "lz4"), (1, "snappy")]}
RETENTION_BYTES = {"clicks": 64 * 1024}  # expiry deletes the oldest clicks segments
DEMO_TOPIC_IDS = uuid.UUID("5f0d1e2c-7a4b-4c1e-9d3f-2b6a8c0e4f11")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"demo check failed: {message}")


def write_logs(logs: Path) -> list[PartitionDir]:
    """The Kafka log dir: orders over epochs 0 and 3 with two transactions, clicks plain."""
    codecs = available_codecs()
    pdirs = []
    for topic, partitions in LAYOUT.items():
        # As in Kafka, one id for every partition of a topic. Fixed per topic name so
        # that each run lands on the same metadata partitions and docs/operations.md
        # shows what a reader's own `make demo` prints.
        topic_id = uuid.uuid5(DEMO_TOPIC_IDS, topic)
        for partition, wanted in partitions:
            codec = wanted if wanted in codecs else "gzip"
            # generated values compress ~20x: smaller segments keep the segment count alike
            segment_bytes = 96 * 1024 if codec == "none" else 12 * 1024
            with PartitionDirWriter(
                logs,
                topic,
                partition,
                topic_id=topic_id,
                segment_bytes=segment_bytes,
                compression=codec,
            ) as w:
                w.append_records(generate_records(1500, value_size=300), batch_records=25)
                if topic == "orders":
                    w.set_leader_epoch(3)
                    if partition == 0:
                        pid = 7
                        w.append_records(
                            generate_records(20, start=w.log_end_offset),
                            producer_id=pid,
                            producer_epoch=0,
                            transactional=True,
                            batch_records=10,
                        )
                        w.commit_transaction(pid, 0)
                        w.append_records(
                            generate_records(30, start=w.log_end_offset),
                            producer_id=pid,
                            producer_epoch=0,
                            transactional=True,
                            batch_records=10,
                        )
                        w.abort_transaction(pid, 0)
                w.append_records(
                    generate_records(1500, start=w.log_end_offset, value_size=300),
                    batch_records=25,
                )
            pdirs.append(PartitionDir(logs / f"{topic}-{partition}"))
    return pdirs


def write_config(data_dir: Path) -> Path:
    overrides = "".join(
        f'[offload.topics.{topic}]\n"retention.bytes" = {size}\n'
        for topic, size in RETENTION_BYTES.items()
    )
    path = data_dir / "demo.toml"
    path.write_text(
        f"""# Written by `make demo`: the metadata and remote store the demo filled.
# Open them with `rlmm --config {path} ...` or the kafka-archive Spark source.
broker_id = 0
data_dir = "{data_dir}"

[eventlog]
type = "file"
partitions = 50    # the embedded default: `RLMM_DATA_DIR=demo-data rlmm ...` reads it too
dir = "{data_dir / "metadata-log"}"

[snapshot]
enabled = true
dir = "{data_dir / "snapshots"}"

[remote]
type = "local"
root = "{data_dir / "remote"}"

[offload]
"retention.ms" = -1          # generated records are from 2023: time retention would drop all
"remote.log.manager.copier.thread.pool.size" = 4

{overrides}"""
    )
    return path


def compare_objects(
    rsm: RemoteStorageManager, pdir: PartitionDir, m: RemoteLogSegmentMetadata
) -> int:
    """Byte-for-byte check of every object of ``m`` against the local files; the count."""
    seg = pdir.segment(m.start_offset)
    data = log_segment_data(seg, seg.summary())
    checked = 0
    for kind in OBJECT_KINDS:
        source = data.source(kind)
        name = object_name(m, kind)
        try:
            with rsm.open_object(name) as f:
                stored: bytes | None = f.read()
        except RemoteResourceNotFoundError:
            stored = None
        if source is None:
            check(stored is None, f"{name} exists but {seg.log_path} has no {kind_label(kind)}")
            continue
        local = source if isinstance(source, bytes) else source.read_bytes()
        check(stored == local, f"{name} differs from the local {kind_label(kind)}")
        checked += 1
    return checked


def aborted_offsets(pdir: PartitionDir) -> set[int]:
    """Offsets of records whose transaction ended in an abort marker (local scan)."""
    pending: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for seg in pdir.segments():
        for r in iter_records(seg.log_path, name=str(seg.log_path)):
            if r.is_control:
                offsets = pending.pop(r.producer_id, [])
                if r.control_type == 0:
                    aborted.update(offsets)
            elif r.is_transactional:
                pending.setdefault(r.producer_id, []).append(r.offset)
    return aborted


def expected_reads(
    rsm: RemoteStorageManager, pdir: PartitionDir, archived: list[RemoteLogSegmentMetadata]
) -> dict[str, Any]:
    aborted = aborted_offsets(pdir)
    uncommitted = committed = control = 0
    for m in archived:
        with rsm.fetch_log_segment(m, 0) as stream:
            for r in iter_records(stream.read(), name=str(m.remote_log_segment_id)):
                if r.is_control:
                    control += 1
                    continue
                uncommitted += 1
                committed += r.offset not in aborted
    return {
        "archived_segments": len(archived),
        "start_offset": archived[0].start_offset if archived else None,
        "end_offset": archived[-1].end_offset if archived else None,
        "read_uncommitted": uncommitted,
        "read_committed": committed,
        "control_records": control,
        "aborted_records": uncommitted - committed,
    }


@dataclass
class DemoRun:
    """What the demo's pipeline did: its summary, and what retention expired."""

    summary: dict[str, Any]
    copied: int
    expired: dict[TopicIdPartition, list[Victim]] = field(default_factory=dict)
    settings: OffloadSettings = field(default_factory=OffloadSettings)

    def expiry_line(self) -> str:
        """Which segments retention deleted after they were copied, and by which setting:
        the listing after it shows fewer segments than were copied."""
        deleted = sum(len(v) for v in self.expired.values())
        if not deleted:
            return f"retention expired none of the {self.copied} segments copied"
        spans: list[str] = []
        settings: dict[str, None] = {}
        for tp, victims in self.expired.items():
            if not victims:
                continue
            first = min(v.segment.start_offset for v in victims)
            last = max(v.segment.end_offset for v in victims)
            n = len(victims)
            spans.append(
                f"{tp.topic}-{tp.partition} offsets {first}..{last}"
                f" ({n} segment{'s' if n > 1 else ''})"
            )
            for reason in dict.fromkeys(v.reason for v in victims):
                settings[f"{tp.topic}: {self._setting(tp.topic, reason)}"] = None
        return (
            f"retention expired {deleted} of the {self.copied} segments copied"
            f" ({'; '.join(settings)}): " + ", ".join(spans)
        )

    def _setting(self, topic: str, reason: str) -> str:
        retention = self.settings.retention_for(topic)
        if reason == "retention.bytes":
            return (
                f"retention.bytes={retention.retention_bytes},"
                f" {human_bytes(retention.retention_bytes)} over local + remote"
            )
        if reason == "retention.ms":
            return f"retention.ms={retention.retention_ms}"
        return reason


async def offload(config_path: Path, logs: Path, pdirs: list[PartitionDir]) -> DemoRun:
    """The demo's pipeline; returns what it did (and writes expected.json)."""
    # 1. the sidecar, once, with retention off: every rolled segment is copied
    no_expiry = {f"offload.topics.{t}.retention.bytes": -1 for t in RETENTION_BYTES}
    config = load_config(config_path, env={}, overrides=no_expiry)
    t0 = time.perf_counter()
    report = await run_sidecar(config, [logs], once=True, display=Display(rich=False))
    copy_s = time.perf_counter() - t0
    rolled = sum(len(p.segments()) - 1 for p in pdirs)
    check(report.tally.errors == [], f"offload errors: {report.tally.errors}")
    check(report.tally.copied == rolled, f"{report.tally.copied} of {rolled} segments copied")

    # 2. restart from the snapshot, check every object, expire what retention says
    config = load_config(config_path, env={})
    tps = [p.topic_id_partition() for p in pdirs]
    manager = create_manager(config, open_event_log(config))
    rsm = open_remote_storage(config)
    t1 = time.perf_counter()
    await manager.start()
    await manager.on_partition_leadership_changes(tps, [])
    await manager.wait_until_ready(tps, float(config.manager["ready_timeout_s"]))
    restart_ms = (time.perf_counter() - t1) * 1000
    try:
        check(manager.stats.restored_from_snapshot, "the restart did not use the snapshot")
        replayed = manager.stats.applied_events
        objects = sum(
            compare_objects(rsm, pdir, m)
            for pdir, tp in zip(pdirs, tps, strict=True)
            for m in manager.list_remote_log_segments(tp)
        )
        settings = OffloadSettings.from_config(config)
        rlm = RemoteLogManager(manager, rsm, broker_id=config.broker_id)
        sources = scan_log_dirs([logs], settings)
        await rlm.on_leadership_changes(sources, start_tasks=False)
        expired = {tp: await rlm.expire_round(tp) for tp in tps}
        await rlm.close()
        deleted = sum(len(r.deleted) for r in expired.values())
        remaining_count = sum(len(manager.list_remote_log_segments(tp)) for tp in tps)
        for tp, result in expired.items():
            wanted = tp.topic in RETENTION_BYTES
            check(bool(result.deleted) == wanted, f"expiry of {tp}: {len(result.deleted)} deleted")
            remaining = manager.list_remote_log_segments(tp)
            if result.deleted and remaining:
                check(
                    max(v.segment.end_offset for v in result.deleted) < remaining[0].start_offset,
                    f"expiry of {tp} did not delete the oldest segments first",
                )
        expected: dict[str, Any] = {"config": str(config_path), "topics": {}}
        for pdir, tp in zip(pdirs, tps, strict=True):
            topic = expected["topics"].setdefault(
                tp.topic, {"topic_id": kafka_uuid_to_str(tp.topic_id), "partitions": {}}
            )
            archived = manager.list_remote_log_segments(tp)
            topic["partitions"][str(tp.partition)] = expected_reads(rsm, pdir, archived)
        (config.data_dir / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    finally:
        await manager.close()
        rsm.close()
    summary = {
        "partitions offloaded": len(tps),
        "segments copied": report.tally.copied,
        "bytes copied": human_bytes(report.tally.copied_bytes),
        "copy time": f"{copy_s:.2f}s",
        "objects identical to local files": objects,
        "restart from snapshot": f"{restart_ms:.0f} ms, {replayed} events replayed",
        "segments expired by retention": deleted,
        "segments in remote storage": remaining_count,
        "expected reads": str(config.data_dir / "expected.json"),
    }
    return DemoRun(
        summary,
        copied=report.tally.copied,
        expired={tp: r.deleted for tp, r in expired.items()},
        settings=settings,
    )


def show_archive(config_path: Path, run: DemoRun) -> list[RemoteLogSegmentMetadata]:
    """What retention expired, then what remote storage holds now, printed by
    `rlmm segments list`'s own code (the same Output and formats); the listed segments."""
    config = load_config(config_path, env={})
    output = ConsoleOutput()
    output.out.print(run.expiry_line(), markup=False)
    output.out.print(
        f"remote storage now, as `rlmm --config {config_path} segments list` prints it:",
        markup=False,
    )
    listed = show_segments(config, output)
    check(
        len(listed) == run.summary["segments in remote storage"],
        f"`segments list` shows {len(listed)} segments, the manager held"
        f" {run.summary['segments in remote storage']}",
    )
    with_txns = [m for m in listed if not m.txn_index_empty]
    if with_txns:
        output.out.print(
            "aborted transactions (a transaction index) in: "
            + ", ".join(
                f"{m.topic_id_partition.topic}-{m.topic_id_partition.partition}"
                f" {m.start_offset}..{m.end_offset}"
                for m in with_txns
            ),
            markup=False,
        )
    return listed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlmm.cli.demo", description=__doc__)
    parser.add_argument(
        "--data-dir", type=Path, default=ROOT / "demo-data", help="(default: %(default)s)"
    )
    data_dir = parser.parse_args(argv).data_dir.resolve()
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    logs = data_dir / "kafka-logs"
    pdirs = write_logs(logs)
    config_path = write_config(data_dir)
    console.print(f"[bold]Kafka log dir[/] {logs}: {len(pdirs)} partitions")
    run = asyncio.run(offload(config_path, logs, pdirs))
    summary = Table(title="rlmm demo", show_header=False)
    for key, value in run.summary.items():
        summary.add_row(key, str(value))
    console.print(summary)
    show_archive(config_path, run)
    console.print(f"config for the other tools: {config_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
