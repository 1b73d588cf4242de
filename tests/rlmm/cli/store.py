"""Stores for the ops CLI tests: real segments offloaded through the manager, and damage.

A store is a data dir (file event log + snapshots) with remote storage either local
or on the moto server, described by a TOML config file the CLI reads like a user's.
Segments are written by remote.PartitionDirWriter and copied STARTED -> RSM copy ->
FINISHED through a real manager (tests.rlmm.archive.archive_data.copy_segment).
Each ``seed_*`` function damages the store behind the manager's back the way the
named fault would, and returns what verify must report for it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote import RemoteStorageManager
from remote.naming import object_name
from remote.segments import PartitionDir, PartitionDirWriter, generate_records
from remote.storage import IndexType
from rlmm.config import RlmmConfig, load_config
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    kafka_uuid_to_str,
    new_rlmm_segment_id,
)
from tests.rlmm.archive.archive_data import copy_segment, segment_metadata

ROOT = Path(__file__).resolve().parents[3]
HOUR_MS = 3_600_000
BUCKET = "rlmm-ops"


@dataclass
class Store:
    config_path: Path
    config: RlmmConfig
    segments: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]
    pdirs: dict[TopicIdPartition, PartitionDir]

    def rsm(self) -> RemoteStorageManager:
        return open_remote_storage(self.config)

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``rlmm <args> --config <this store>`` as a user runs it (a new process)."""
        return run_cli(*args, "--config", str(self.config_path), env=env)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("RLMM_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_config(path: Path, data_dir: Path, s3_endpoint: str | None = None) -> RlmmConfig:
    lines = [
        f'data_dir = "{data_dir}"',
        "[eventlog]",
        "partitions = 4",
        'fsync = "interval"',
        "[remote]",
    ]
    if s3_endpoint is None:
        lines.append('type = "local"')
    else:
        lines += [
            'type = "s3"',
            f'bucket = "{BUCKET}"',
            'prefix = "tiered"',
            f'endpoint_url = "{s3_endpoint}"',
            'region = "us-east-1"',
            "max_attempts = 2",
        ]
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, env={})


def write_partition(parent: Path, topic: str, partition: int, segments: int) -> PartitionDir:
    """A real partition dir with ``segments`` rolled segments (plus the active one)."""
    with PartitionDirWriter(parent, topic, partition, segment_bytes=6 * 1024) as w:
        w.append_records(generate_records(segments * 100, value_size=40), batch_records=10)
        w.set_leader_epoch(2)
        w.append_records(
            generate_records(300, start=segments * 100, value_size=40), batch_records=10
        )
    return PartitionDir(parent / f"{topic}-{partition}")


async def with_manager(
    config: RlmmConfig,
    tps: list[TopicIdPartition],
    work: Callable[[TopicBasedRemoteLogMetadataManager, RemoteStorageManager], Awaitable[Any]],
) -> Any:
    rsm = open_remote_storage(config)
    try:
        async with create_manager(config, open_event_log(config)) as manager:
            await manager.on_partition_leadership_changes(tps, [])
            await manager.wait_until_ready(tps, 30)
            return await work(manager, rsm)
    finally:
        rsm.close()


def build_store(tmp: Path, s3_endpoint: str | None = None, skip: tuple[int, ...] = ()) -> Store:
    """orders-0 (several segments, two leader epochs) and orders-1 (two), all FINISHED;
    the rolled segments of orders-0 whose index is in ``skip`` are not copied."""
    config_path = tmp / "rlmm.toml"
    config = write_config(config_path, tmp / "data", s3_endpoint)
    if s3_endpoint is not None:
        import boto3

        boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
            Bucket=BUCKET
        )
    pdirs = [write_partition(tmp / "logs", "orders", p, n) for p, n in ((0, 5), (1, 2))]
    tps = [p.topic_id_partition() for p in pdirs]

    async def copy_all(
        manager: TopicBasedRemoteLogMetadataManager, rsm: RemoteStorageManager
    ) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
        out: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}
        for tp, pdir in zip(tps, pdirs, strict=True):
            rolled = pdir.segments()[:-1]
            out[tp] = [
                await copy_segment(manager, rsm, tp, seg)
                for i, seg in enumerate(rolled)
                if not (tp.partition == 0 and i in skip)
            ]
        return out

    segments = asyncio.run(with_manager(config, tps, copy_all))
    return Store(config_path, config, segments, dict(zip(tps, pdirs, strict=True)))


def sid(m: RemoteLogSegmentMetadata) -> str:
    return kafka_uuid_to_str(m.remote_log_segment_id.id)


# --- damage -------------------------------------------------------------------------------


def expected(
    kind: str, m: RemoteLogSegmentMetadata | None = None, name: str | None = None
) -> tuple[Any, ...]:
    """The (kind, segment_id, object_name) verify reports for one seeded problem."""
    return (kind, None if m is None else sid(m), name)


def seed_orphan(
    store: Store, rsm: RemoteStorageManager, age_ms: int = 2 * HOUR_MS
) -> list[tuple[Any, ...]]:
    """A complete copy of orders-1's active segment that no metadata names (a copy whose
    STARTED event was never written); each of its objects is reported."""
    tp = next(tp for tp in store.pdirs if tp.partition == 1)
    seg = store.pdirs[tp].segments()[-1]
    metadata, summary = segment_metadata(tp, seg)
    from remote.segment_data import log_segment_data

    rsm.copy_log_segment_data(metadata, log_segment_data(seg, summary))
    names = sorted(o.name for o in rsm.list_objects(tp) if sid(metadata) in o.name)
    for name in names:
        _age(store, name, age_ms)
    return [("orphan_object", sid(metadata), n) for n in names]


def _age(store: Store, name: str, age_ms: int) -> None:
    if store.config.remote.get("type", "local") == "local":
        path = Path(store.config.remote_options()["root"]) / name
        t = time.time() - age_ms / 1000
        os.utime(path, (t, t))


def stuck_started(
    store: Store, age_ms: int = 2 * HOUR_MS, count: int = 1
) -> RemoteLogSegmentMetadata:
    """orders-0's active segment, ``count`` times: COPY_SEGMENT_STARTED ``age_ms`` ago,
    objects copied, never FINISHED (a broker that died mid-copy). Returns the last."""
    return started_copies(store, age_ms, count)[-1]


def started_copies(
    store: Store, age_ms: int = 2 * HOUR_MS, count: int = 1
) -> list[RemoteLogSegmentMetadata]:
    tp = next(tp for tp in store.pdirs if tp.partition == 0)
    seg = store.pdirs[tp].segments()[-1]
    from remote.segment_data import log_segment_data

    async def work(
        manager: TopicBasedRemoteLogMetadataManager, rsm: RemoteStorageManager
    ) -> list[RemoteLogSegmentMetadata]:
        out = []
        for _ in range(count):
            metadata, summary = segment_metadata(tp, seg)
            # rlmm's own stuck copy: its id carries rlmm's signature, as the sidecar's do
            old = RemoteLogSegmentMetadata(
                new_rlmm_segment_id(tp), metadata.start_offset, metadata.end_offset,
                metadata.max_timestamp_ms, 0, int(time.time() * 1000) - age_ms,
                metadata.segment_size_in_bytes, metadata.segment_leader_epochs,
                txn_index_empty=metadata.txn_index_empty,
            )  # fmt: skip
            await manager.add_remote_log_segment_metadata(old)
            await asyncio.to_thread(rsm.copy_log_segment_data, old, log_segment_data(seg, summary))
            out.append(old)
        return out

    result: list[RemoteLogSegmentMetadata] = asyncio.run(with_manager(store.config, [tp], work))
    return result


def stuck_deleting(store: Store, age_ms: int = 2 * HOUR_MS) -> RemoteLogSegmentMetadata:
    """orders-1's last segment: DELETE_SEGMENT_STARTED long ago, objects still there."""
    tp = next(tp for tp in store.pdirs if tp.partition == 1)
    m = store.segments[tp][-1]

    async def work(
        manager: TopicBasedRemoteLogMetadataManager, rsm: RemoteStorageManager
    ) -> RemoteLogSegmentMetadata:
        update = RemoteLogSegmentMetadataUpdate(
            m.remote_log_segment_id, int(time.time() * 1000) - age_ms, m.custom_metadata,
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 0,
        )  # fmt: skip
        await manager.update_remote_log_segment_metadata(update)
        return m.create_with_updates(update)

    result: RemoteLogSegmentMetadata = asyncio.run(
        with_manager(store.config, [m.topic_id_partition], work)
    )
    return result


def open_stale_upload(rsm: RemoteStorageManager, m: RemoteLogSegmentMetadata) -> tuple[str, str]:
    """An open multipart upload of ``m``'s log object (a copy killed mid-upload)."""
    from remote.s3 import S3RemoteStorageManager

    assert isinstance(rsm, S3RemoteStorageManager)
    name = object_name(m, None)
    created = rsm.client.create_multipart_upload(Bucket=BUCKET, Key=f"{rsm.prefix}/{name}")
    return name, created["UploadId"]


def rewrite(store: Store, rsm: RemoteStorageManager, name: str, data: bytes) -> None:
    """Replace one stored object's bytes behind the manager's back."""
    if store.config.remote.get("type", "local") == "local":
        (Path(store.config.remote_options()["root"]) / name).write_bytes(data)
        return
    from remote.s3 import S3RemoteStorageManager

    assert isinstance(rsm, S3RemoteStorageManager)
    key = f"{rsm.prefix}/{name}"
    head = rsm.client.head_object(Bucket=BUCKET, Key=key)
    rsm.client.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata=head["Metadata"])


def read(rsm: RemoteStorageManager, name: str) -> bytes:
    with rsm.open_object(name) as stream:
        return stream.read()


__all__ = [
    "HOUR_MS",
    "IndexType",
    "Store",
    "build_store",
    "expected",
    "open_stale_upload",
    "read",
    "rewrite",
    "run_cli",
    "seed_orphan",
    "sid",
    "started_copies",
    "stuck_deleting",
    "stuck_started",
]
