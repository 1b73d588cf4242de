"""Snapshots shared through S3 (moto server): managers built from configuration publish
under ``<prefix>/__snapshots/<owner>/``; a fresh manager on another data dir, a new
broker and the read-only view start from them and replay only the tail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from rlmm.archive import load_metadata_view
from rlmm.config import RlmmConfig, load_config
from rlmm.errors import ConfigError
from rlmm.factory import create_manager, open_event_log, open_snapshot_source
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.snapshotting import newest_snapshot
from snapshot.s3 import S3SnapshotStore
from tests.rlmm.factories import tp
from tests.rlmm.helpers import sequential_replay
from tests.rlmm.test_manager_retention import run
from tests.rlmm.test_manager_snapshots import Workload

pytestmark = pytest.mark.s3

N = 4
TPS = [tp(i) for i in range(6)]
BUCKET = "tiered"


@pytest.fixture
def bucket(s3_endpoint: str) -> Iterator[Any]:
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client
    finally:
        client.close()


def config(
    tmp_path: Path, endpoint: str, data_dir: str, broker_id: int = 0, **extra: Any
) -> RlmmConfig:
    overrides = {
        "data_dir": str(tmp_path / data_dir),
        "broker_id": broker_id,
        "eventlog.dir": str(tmp_path / "metadata-log"),  # the one shared metadata log
        "eventlog.partitions": N,
        "eventlog.segment_bytes": 2048,
        "remote.type": "s3",
        "remote.bucket": BUCKET,
        "remote.prefix": "cluster-a",
        "remote.endpoint_url": endpoint,
        "remote.region": "us-east-1",
        "snapshot.store": "s3",
        "snapshot.every_events": 40,
        "snapshot.interval_s": 3600,
        **extra,
    }
    return load_config(env={}, overrides=overrides)


async def start(cfg: RlmmConfig) -> TopicBasedRemoteLogMetadataManager:
    manager = create_manager(cfg, open_event_log(cfg))
    await manager.start()
    await manager.on_partition_leadership_changes(TPS, [])
    await manager.wait_until_ready(TPS, 20)
    return manager


async def test_fresh_manager_on_another_data_dir_starts_from_s3(
    tmp_path: Path, s3_endpoint: str, bucket: Any
) -> None:
    work = Workload(TPS, 1)
    a = await start(config(tmp_path, s3_endpoint, "a", **{"snapshot.retention": False}))
    await run(a, work, 200)
    await a.close()
    keys = [o["Key"] for o in bucket.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys and all(k.startswith("cluster-a/__snapshots/broker-0/snapshot-") for k in keys)
    assert len(keys) == 2  # keep = 2
    # A tail nobody snapshotted (written with snapshots off).
    tail_writer = await start(
        config(tmp_path, s3_endpoint, "t", broker_id=9, **{"snapshot.enabled": False})
    )
    await run_without_snapshots(tail_writer, work, 30)
    await tail_writer.close()
    # Same broker on a new disk (replays the tail, then publishes a snapshot at close),
    # then a new broker: both start from broker-0's newest snapshot.
    for data_dir, broker_id, tail in (("a-new-disk", 0, True), ("b", 1, False)):
        cfg = config(tmp_path, s3_endpoint, data_dir, broker_id, **{"snapshot.retention": False})
        fresh = await start(cfg)
        assert fresh.stats.restored_from_snapshot
        assert (0 < fresh.stats.applied_events <= 30) if tail else fresh.stats.applied_events == 0
        rebuilt = fresh.fingerprint()
        await fresh.close()
        log = open_event_log(cfg)
        await log.start()
        assert rebuilt == (await sequential_replay(log)).fingerprint()
        await log.close()


async def run_without_snapshots(
    manager: TopicBasedRemoteLogMetadataManager, work: Workload, steps: int
) -> None:
    for _ in range(steps):
        await work.step(manager)


async def test_partition_below_the_log_start_restarts_from_another_owners_snapshot(
    tmp_path: Path, s3_endpoint: str, bucket: Any
) -> None:
    work = Workload(TPS, 2)
    # broker-1 (a reader that does not register) leaves an early snapshot behind.
    cfg_b = config(tmp_path, s3_endpoint, "b", 1, **{"snapshot.retention": False})
    b = await start(cfg_b)
    await run(b, work, 40)
    await b.close()
    # broker-0 runs on, snapshots and lets the log drop what its snapshots cover.
    a = await start(config(tmp_path, s3_endpoint, "a", 0))
    await run(a, work, 400)
    expected = a.fingerprint()
    await a.close()
    cfg_view = config(tmp_path, s3_endpoint, "view")
    log = open_event_log(cfg_view)
    await log.start()
    starts = await log.start_offsets(range(N))  # type: ignore[attr-defined]
    await log.close()
    assert any(s > 0 for s in starts.values())
    # broker-1's own snapshot is now below the log start: it must not silently skip.
    b = await start(cfg_b)
    assert b.stats.partitions_restored >= 1
    assert b.fingerprint() == expected
    await b.close()
    # The read-only view's entry point: the newest published snapshot the log can continue.
    store = open_snapshot_source(cfg_view)
    try:
        found = newest_snapshot(cfg_view, store)
        assert newest_snapshot(cfg_view, store, [0], log_starts={0: 10**9}) is None
    finally:
        store.close()
    assert found is not None
    assert found.location.startswith(f"s3://{BUCKET}/cluster-a/__snapshots/broker-")
    assert all(found.snapshot.applied_offsets[p] + 1 >= starts[p] for p in range(N))
    # The read-only metadata view starts from it too, and replays only the tail.
    view = await load_metadata_view(cfg_view)
    try:
        assert view.stats.restored_from_snapshot
        assert view.fingerprint() == expected
    finally:
        view.close()
    source = open_snapshot_source(cfg_view)
    try:
        assert isinstance(source, S3SnapshotStore) and source.read_only
        assert source.owners() == ["broker-0", "broker-1"]
    finally:
        source.close()


def test_s3_snapshots_need_s3_remote_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"remote\.type = 's3'"):
        load_config(env={}, overrides={"snapshot.store": "s3"})
    with pytest.raises(ConfigError, match=r"snapshot\.store must be local or s3"):
        load_config(env={}, overrides={"snapshot.store": "nfs"})
    with pytest.raises(ConfigError, match=r"snapshot\.retention"):
        load_config(env={}, overrides={"snapshot.retention": "sometimes"})
    cfg = load_config(env={}, overrides={"broker_id": 7, "snapshot.owner": "edge-7"})
    assert cfg.snapshot_owner() == "edge-7"
    assert load_config(env={}, overrides={"broker_id": 7}).snapshot_owner() == "broker-7"


async def test_unreachable_snapshot_bucket_means_a_full_replay(
    tmp_path: Path, s3_endpoint: str, bucket: Any, caplog: pytest.LogCaptureFixture
) -> None:
    work = Workload(TPS, 3)
    cfg = config(tmp_path, s3_endpoint, "a", **{"snapshot.retention": False})
    a = await start(cfg)
    await run(a, work, 50)
    expected = a.fingerprint()
    await a.close()
    gone = config(
        tmp_path, s3_endpoint, "a", **{"snapshot.retention": False, "remote.bucket": "gone"}
    )
    again = await start(gone)
    assert not again.stats.restored_from_snapshot
    assert "cannot read snapshots" in caplog.text and "gone" in caplog.text
    assert again.fingerprint() == expected
    await again.close()
    assert again.stats.snapshot_failures >= 1  # snapshots have nowhere to go: counted
