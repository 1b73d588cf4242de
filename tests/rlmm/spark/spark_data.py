"""Helpers of the Spark tests: reading through ``format("kafka-archive")`` into the rows
``tests.rlmm.archive.archive_data.rows`` gives, and a partition whose archive has a
leader change and a superseded copy.

The old leader (epoch 0) wrote offsets 0..100; the new leader took over at 50,
truncated the old leader's uncommitted tail at 80 (epoch 1 from there) and went on
to 200. Copies, in the order a broker would make them: the old leader's [0, 99],
the new leader's [50, 149], then its [150, 200] twice (a retried copy supersedes the
first). Read back, the archive is 0..79 of the old leader and 80..200 of the new one.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from remote.segments import PartitionDir, PartitionDirWriter, ProducerRecord
from rlmm.config import RlmmConfig
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.model import TopicIdPartition
from tests.rlmm.archive.archive_data import copy_segment, make_config, rows

# An open cost as large as an input partition's bytes: one input partition per slice,
# so a test can count the slices a read planned.
UNPACKED = {"openCostInBytes": str(128 * 1024 * 1024)}


def overrides(config: RlmmConfig) -> dict[str, str]:
    """The ``rlmm.*`` options that name ``config`` inline (no TOML file)."""
    out = {"rlmm.data_dir": str(config.data_dir)}
    out["rlmm.eventlog.partitions"] = str(config.eventlog["partitions"])
    for key, value in config.remote.items():
        out[f"rlmm.remote.{key}"] = str(value)
    return out


def read(spark: Any, **options: str) -> Any:
    reader = spark.read.format("kafka-archive")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def spark_rows(df: Any) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
    """(topic, partition) -> rows as archive_data.rows gives them, in offset order."""
    table = df.toArrow()
    out: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    topics = table.column("topic").to_pylist()
    partitions = table.column("partition").to_pylist()
    for key, row in zip(
        zip(topics, partitions, strict=True), rows(table.to_batches()), strict=True
    ):
        out.setdefault(key, []).append(row)
    for got in out.values():
        assert [r[0] for r in got] == sorted(r[0] for r in got)  # slices come in order
    return out


def copy_segments(config: RlmmConfig, tp: TopicIdPartition, segments: list[Any]) -> None:
    """Copy ``segments`` in this order (STARTED -> RSM copy -> FINISHED each)."""

    async def copy() -> None:
        rsm = open_remote_storage(config)
        try:
            async with create_manager(config, open_event_log(config)) as manager:
                await manager.on_partition_leadership_changes([tp], [])
                await manager.wait_until_ready([tp], 30)
                for seg in segments:
                    await copy_segment(manager, rsm, tp, seg)
        finally:
            rsm.close()

    asyncio.run(copy())


def _records(keys: range, prefix: str) -> list[ProducerRecord]:
    return [ProducerRecord(f"{prefix}{n}".encode(), b"v", (), 1000 + n) for n in keys]


def write_leader_change(tmp: Path) -> tuple[RlmmConfig, list[bytes]]:
    """Offload the history above under ``tmp``; the config and the keys expected."""
    topic_id = uuid.uuid4()
    with PartitionDirWriter(tmp / "old", "t", 0, topic_id=topic_id, segment_records=100) as w:
        w.append_records(_records(range(101), "old"), batch_records=5)
    with PartitionDirWriter(
        tmp / "new", "t", 0, topic_id=topic_id, segment_records=100, start_offset=50
    ) as w:
        w.append_records(_records(range(50, 80), "old"), batch_records=5)
        w.set_leader_epoch(1)
        w.append_records(_records(range(80, 201), "new"), batch_records=5)
    old, new = PartitionDir(tmp / "old" / "t-0"), PartitionDir(tmp / "new" / "t-0")
    config = make_config(tmp / "rlmm")
    retried = new.segments()[1]
    copy_segments(
        config, old.topic_id_partition(), [old.segments()[0], new.segments()[0], retried, retried]
    )
    keys = [f"{'old' if n < 80 else 'new'}{n}".encode() for n in range(201)]
    return config, keys
