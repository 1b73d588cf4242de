"""A topic whose records span time, for the pushdown tests: topic ``tl``, partitions 0
and 1, many small segments, one record a second, and timestamps that do not grow
with offsets everywhere (a late record carrying an old timestamp, one from the
future), so pruning by timestamps is checked where it could go wrong.

Every record of partition ``p`` at offset ``n`` has key ``p:n``; its timestamp is
``BASE_TS + n * 1000`` except at the offsets in ``OUT_OF_ORDER``.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from remote import IndexType
from remote.layouts.local_tiered_storage import ROOT_DIR_NAME
from remote.naming import OBJECT_KINDS, object_name
from remote.segments import PartitionDir, PartitionDirWriter, ProducerRecord
from rlmm.archive import open_metadata_view
from rlmm.config import RlmmConfig
from rlmm.model import kafka_uuid_to_str
from tests.rlmm.archive.archive_data import make_config, offload

TOPIC = "tl"
PARTITIONS = 2
RECORDS = 2000
SEGMENT_RECORDS = 100
BASE_TS = 1_700_000_000_000
# offset -> timestamp: a straggler written late with an old timestamp, and one record
# stamped an hour ahead (its segment's max timestamp covers everything after it).
OUT_OF_ORDER = {1510: BASE_TS + 300 * 1000, 700: BASE_TS + 3_600_000}


LTS_SUFFIX = {
    None: ".log",
    IndexType.OFFSET: ".index",
    IndexType.TIMESTAMP: ".timeindex",
    IndexType.TRANSACTION: ".txnindex",
    IndexType.PRODUCER_SNAPSHOT: ".snapshot",
    IndexType.LEADER_EPOCH: ".leader_epoch_checkpoint",
}


def timestamp_of(offset: int) -> int:
    return OUT_OF_ORDER.get(offset, BASE_TS + offset * 1000)


def write_timeline(tmp: Path) -> tuple[RlmmConfig, dict[int, list[tuple[int, int, bytes]]]]:
    """Write and offload the topic under ``tmp``; the config and, per partition, the
    archived records as (offset, timestamp ms, key)."""
    config = make_config(tmp / "rlmm")
    dirs, archived = [], {}
    for p in range(PARTITIONS):
        with PartitionDirWriter(
            tmp / "logs", TOPIC, p, segment_records=SEGMENT_RECORDS, index_interval_bytes=256
        ) as w:
            records = [
                ProducerRecord(f"{p}:{n}".encode(), b"v" * 20, (), timestamp_of(n))
                for n in range(RECORDS)
            ]
            w.append_records(records, batch_records=10)
        pdir = PartitionDir(tmp / "logs" / f"{TOPIC}-{p}")
        active = pdir.segments()[-1].base_offset
        archived[p] = [(n, timestamp_of(n), f"{p}:{n}".encode()) for n in range(active)]
        dirs.append(pdir)
    asyncio.run(offload(config, dirs))
    return config, archived


def as_local_tiered_storage(config: RlmmConfig, root: Path) -> dict[str, Any]:
    """The same copies laid out as Kafka's LocalTieredStorage lays them out: the remote
    options of that layout (which records no smallest timestamp)."""
    rsm_root = Path(config.remote_options()["root"])
    with open_metadata_view(config) as view:
        segments = [m for tp in view.topic_partitions() for m in view.lineage(tp)]
    for m in segments:
        tp = m.topic_id_partition
        directory = (
            root / ROOT_DIR_NAME / f"{tp.topic}-{tp.partition}-{kafka_uuid_to_str(tp.topic_id)}"
        )
        directory.mkdir(parents=True, exist_ok=True)
        base = f"{m.start_offset:020d}-{kafka_uuid_to_str(m.remote_log_segment_id.id)}"
        for kind in OBJECT_KINDS:
            source = rsm_root / object_name(m, kind)
            if source.exists():
                shutil.copyfile(source, directory / (base + LTS_SUFFIX[kind]))
    return {"type": "local-tiered-storage", "dir": str(root)}
