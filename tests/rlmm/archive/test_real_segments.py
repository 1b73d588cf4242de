"""Real broker-written segments (and real fetch-response record sets), offloaded and read
through the archive reader, give exactly what kafka-python decodes from the same bytes."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from remote.segments import (
    EpochEntry,
    PartitionDir,
    encode_leader_epoch_checkpoint,
    encode_partition_metadata,
    encode_producer_snapshot,
)
from rlmm.archive import ReadRequest, open_metadata_view, plan_slices
from rlmm.archive.reader import read_slice
from tests.remote.segments._data import (
    TIMEINDEX_TEST,
    TOPIC_A,
    TOPIC_B,
    kafka_python_records,
    segmentio_record_set,
)
from tests.rlmm.archive.archive_data import make_config, offload, rows

SEGMENTIO = ["v1c-v1-v1c", "v2c-v2-v2c", "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc"]


def as_partition_dir(source: Path | None, target: Path, log: bytes | None = None) -> PartitionDir:
    """A copy of ``source`` (or a dir holding ``log`` as its only segment) with the
    side files a copy needs that the fixture lacks (leader epoch 0, empty indexes, an
    empty producer snapshot at each segment's end, partition.metadata); the .log bytes
    are untouched."""
    if source is not None:
        shutil.copytree(source, target)
    else:
        target.mkdir(parents=True)
        assert log is not None
        (target / f"{0:020d}.log").write_bytes(log)
    if not (target / "partition.metadata").exists():
        (target / "partition.metadata").write_bytes(encode_partition_metadata(uuid.uuid4()))
    if not (target / "leader-epoch-checkpoint").exists():
        base = PartitionDir(target).segments()[0].base_offset
        (target / "leader-epoch-checkpoint").write_bytes(
            encode_leader_epoch_checkpoint([EpochEntry(0, base)])
        )
    for seg in PartitionDir(target).segments():
        for path in (seg.offset_index_path, seg.time_index_path):
            if not path.exists():
                path.write_bytes(b"")
        end = seg.summary().next_offset
        snapshot = target / f"{end:020d}.snapshot"
        if not snapshot.exists():
            snapshot.write_bytes(encode_producer_snapshot([]))
    return PartitionDir(target)


def kafka_python_rows(pdir: PartitionDir) -> list[tuple[Any, ...]]:
    out = []
    for seg in pdir.segments():
        for r in kafka_python_records(seg.log_path.read_bytes()):
            if r.is_control:
                continue
            ts = -1 if r.timestamp is None else r.timestamp
            out.append((r.offset, r.key, r.value, tuple(r.headers), ts))
    return out


def test_real_segments_read_as_kafka_python_decodes_them(tmp_path: Path, monkeypatch: Any) -> None:
    import rlmm.archive.reader as reader

    logs = tmp_path / "logs"
    dirs = [
        as_partition_dir(TIMEINDEX_TEST, logs / "timeindex_test-0"),
        as_partition_dir(TOPIC_A, logs / "test_topic_a-0"),
        as_partition_dir(TOPIC_B, logs / "test_topic_b-0"),
        *(
            as_partition_dir(None, logs / f"segmentio-{i}-0", segmentio_record_set(name))
            for i, name in enumerate(SEGMENTIO)
        ),
    ]
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, dirs, skip_active=False))
    with open_metadata_view(config) as view:
        for pdir in dirs:
            # Default batches, and small ones built 7 rows at a time and concatenated
            # (chunks of magic 0/1 and v2 batches, of both timestamp types, in one batch).
            for slice_bytes, build_rows, batch_rows in [
                (1 << 30, reader.BUILD_ROWS, reader.DEFAULT_BATCH_ROWS),
                (64 * 1024, reader.BUILD_ROWS, reader.DEFAULT_BATCH_ROWS),
                (1 << 30, 7, 100),
            ]:
                monkeypatch.setattr(reader, "BUILD_ROWS", build_rows)
                request = ReadRequest(
                    topics=(pdir.topic,), include_headers=True, max_slice_bytes=slice_bytes
                )
                slices = plan_slices(view, request, config.remote_options())
                got = [
                    r[:5]
                    for piece in slices
                    for r in rows(read_slice(piece, batch_rows=batch_rows))
                ]
                assert got == kafka_python_rows(pdir), (pdir.topic, slice_bytes, build_rows)
                assert len(got) > 0
    assert len(kafka_python_rows(dirs[0])) == 15363


@pytest.mark.parametrize("name", SEGMENTIO)
def test_magic_0_1_timestamp_types(tmp_path: Path, name: str) -> None:
    pdir = as_partition_dir(None, tmp_path / "logs" / "s-0", segmentio_record_set(name))
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [pdir], skip_active=False))
    with open_metadata_view(config) as view:
        (piece,) = plan_slices(view, ReadRequest(topics=("s",)), config.remote_options())
    got = rows(read_slice(piece))
    assert {r[5] for r in got} == {0}  # CreateTime, as kafka-python reports it
