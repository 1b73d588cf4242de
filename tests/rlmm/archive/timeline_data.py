"""A topic whose records span time, for the pushdown tests: topic ``tl``, partitions 0
and 1, many small segments, one record a second, and timestamps that do not grow
with offsets everywhere (a late record carrying an old timestamp, one from the
future), so pruning by timestamps is checked where it could go wrong.

Every record of partition ``p`` at offset ``n`` has key ``p:n``; its timestamp is
``BASE_TS + n * 1000`` except at the offsets in ``OUT_OF_ORDER``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from remote import PartitionDir, PartitionDirWriter, ProducerRecord
from rlmm.config import RlmmConfig
from tests.rlmm.archive.archive_data import make_config, offload

TOPIC = "tl"
PARTITIONS = 2
RECORDS = 2000
SEGMENT_RECORDS = 100
BASE_TS = 1_700_000_000_000
# offset -> timestamp: a straggler written late with an old timestamp, and one record
# stamped an hour ahead (its segment's max timestamp covers everything after it).
OUT_OF_ORDER = {1510: BASE_TS + 300 * 1000, 700: BASE_TS + 3_600_000}


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
