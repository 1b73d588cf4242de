"""Fixtures for the offloader: real Kafka partition dirs, the file event log, local RSM.

Invariant: everything is real (PartitionDirWriter segments, FileEventLog, the local
RSM); ``check_invariants`` is the one definition of "metadata and objects agree" used
by the unit, kill and S3 fault tests.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remote import IndexType, RemoteStorageManager
from remote.local import LocalRemoteStorageManager
from remote.segments import PartitionDir, PartitionDirWriter, generate_records
from rlmm.base import RemoteLogMetadataManager
from rlmm.config import RlmmConfig, load_config
from rlmm.factory import create_manager, open_event_log
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, kafka_uuid_to_str
from rlmm.offload import LogDirSource, RemoteLogManager, RetentionSettings

ROOT = Path(__file__).resolve().parents[3]
S = RemoteLogSegmentState
KEEP_ALL = RetentionSettings(retention_ms=-1, retention_bytes=-1)


def write_partition(
    parent: Path,
    topic: str,
    partition: int,
    *,
    codec: str = "none",
    records: int = 900,
    segment_bytes: int | None = None,
    epochs: tuple[int, ...] = (0, 2),
    aborted_txn: bool = True,
    topic_id: uuid.UUID | None = None,
    value_size: int = 40,
) -> PartitionDir:
    """A real partition dir: ``records`` records over the given epochs, one aborted txn."""
    if segment_bytes is None:  # compressed batches of generated records are small
        segment_bytes = 16 * 1024 if codec == "none" else 2 * 1024
    with PartitionDirWriter(
        parent,
        topic,
        partition,
        segment_bytes=segment_bytes,
        compression=codec,
        topic_id=topic_id,
        leader_epoch=epochs[0],
    ) as w:
        per_epoch = records // len(epochs)
        n = 0
        for i, epoch in enumerate(epochs):
            w.set_leader_epoch(epoch)
            w.append_records(
                generate_records(per_epoch, start=n, value_size=value_size), batch_records=10
            )
            n += per_epoch
            if aborted_txn and i == 0:
                w.append_records(
                    generate_records(5, start=n),
                    producer_id=42,
                    producer_epoch=0,
                    transactional=True,
                    batch_records=5,
                )
                w.abort_transaction(producer_id=42, producer_epoch=0)
                n += 5
    return PartitionDir(parent / f"{topic}-{partition}")


def make_config(tmp: Path, **overrides: object) -> RlmmConfig:
    return load_config(
        ROOT / "config" / "embedded.toml",
        env={},
        overrides={"data_dir": str(tmp), "eventlog.partitions": 4, **overrides},
    )


def one_partition_sidecar(tmp: Path, offload: str = "") -> tuple[RlmmConfig, Path]:
    """An embedded sidecar's config over one written partition (``orders-0``) and its
    log dir; ``offload`` adds TOML lines to ``[offload]``."""
    logs = tmp / "kafka-logs"
    write_partition(logs, "orders", 0)
    config_path = tmp / "offload.toml"
    config_path.write_text(
        f'data_dir = "{tmp / "data"}"\n[eventlog]\npartitions = 4\n'
        f'[offload]\n"retention.ms" = -1\n{offload}'
    )
    return load_config(config_path, env={}), logs


@pytest.fixture
async def rlmm_manager(tmp_path: Path) -> AsyncIterator[TopicBasedRemoteLogMetadataManager]:
    config = make_config(tmp_path / "rlmm")
    manager = create_manager(config, open_event_log(config))
    await manager.start()
    try:
        yield manager
    finally:
        await manager.close()


@pytest.fixture
def rsm(tmp_path: Path) -> Iterator[LocalRemoteStorageManager]:
    store = LocalRemoteStorageManager(tmp_path / "remote", fsync=False)
    yield store
    store.close()


@pytest.fixture
async def make_rlm(
    rlmm_manager: TopicBasedRemoteLogMetadataManager, rsm: LocalRemoteStorageManager
) -> AsyncIterator[Callable[..., RemoteLogManager]]:
    made: list[RemoteLogManager] = []

    def factory(*, store: RemoteStorageManager | None = None, **options: Any) -> RemoteLogManager:
        options.setdefault("retry_backoff_s", 0.0)
        rlm = RemoteLogManager(rlmm_manager, store or rsm, **options)
        made.append(rlm)
        return rlm

    yield factory
    for rlm in made:
        await rlm.close()


def source(
    pdir: PartitionDir, retention: RetentionSettings = KEEP_ALL, **kw: object
) -> LogDirSource:
    return LogDirSource(pdir, retention, **kw)  # type: ignore[arg-type]


def local_files(pdir: PartitionDir, m: RemoteLogSegmentMetadata) -> dict[object, bytes]:
    """The local bytes each remote object of ``m`` must hold."""
    seg = pdir.segment(m.start_offset)
    out: dict[object, bytes] = {
        None: seg.log_path.read_bytes(),
        IndexType.OFFSET: seg.offset_index_path.read_bytes(),
        IndexType.TIMESTAMP: seg.time_index_path.read_bytes(),
    }
    assert seg.next_base_offset is not None
    out[IndexType.PRODUCER_SNAPSHOT] = (
        pdir.path / f"{seg.next_base_offset:020d}.snapshot"
    ).read_bytes()
    if not m.txn_index_empty:
        out[IndexType.TRANSACTION] = seg.txn_index_path.read_bytes()
    return out


def check_objects_equal_local(
    rsm: RemoteStorageManager, pdir: PartitionDir, m: RemoteLogSegmentMetadata
) -> None:
    for kind, data in local_files(pdir, m).items():
        if kind is None:
            with rsm.fetch_log_segment(m, 0) as stream:
                assert stream.read() == data, f"{m.remote_log_segment_id} log differs"
        else:
            assert isinstance(kind, IndexType)
            assert rsm.fetch_index(m, kind) == data, (
                f"{m.remote_log_segment_id} {kind.name} differs"
            )


def segment_ids_of_keys(keys: list[str]) -> set[str]:
    """The segment ids (Kafka base64) named by object keys or file paths (tmp files too)."""
    out = set()
    for key in keys:
        name = key.rsplit("/", 1)[-1].lstrip(".")
        out.add(name[21:43])
    return out


def local_keys(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]


def check_invariants(
    manager: RemoteLogMetadataManager,
    rsm: RemoteStorageManager,
    pdirs: list[PartitionDir],
    keys: list[str],
) -> list[RemoteLogSegmentMetadata]:
    """FINISHED objects equal the local files, nothing STARTED, no object without a segment."""
    live: list[RemoteLogSegmentMetadata] = []
    for pdir in pdirs:
        tp = pdir.topic_id_partition()
        for m in manager.list_remote_log_segments(tp):
            assert m.state == S.COPY_SEGMENT_FINISHED, (
                f"{m.remote_log_segment_id} left {m.state.name}"
            )
            check_objects_equal_local(rsm, pdir, m)
            live.append(m)
    ids = {kafka_uuid_to_str(m.remote_log_segment_id.id) for m in live}
    orphans = segment_ids_of_keys(keys) - ids
    assert not orphans, f"objects without a live segment: {sorted(orphans)}"
    return live
