"""A partition plan's steps over a real archive (rlmm's layout, offloaded through the
manager): the records of the batches passed through plus the records re-encoded are
exactly the archive's read_committed records, in order; each batch that cannot pass
through (range boundary, murmur2, compacted offsets, LogAppendTime, size) is decoded
instead, and counted with its reason."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from remote.segments import PartitionDir, PartitionDirWriter, generate_records
from rlmm.archive.reader import read_slice, read_slice_batches
from rlmm.config import RlmmConfig
from rlmm.restore import RestorePlan, RestoreSelection
from rlmm.restore.source import (
    ATTRIBUTES,
    BOUNDARY,
    LOG_APPEND_TIME,
    OFFSET_GAPS,
    PARTITIONER,
    TOO_LARGE,
    Passthrough,
    Records,
    SliceEnd,
    partition_steps,
    passthrough_refusal,
)
from tests.rlmm.archive.archive_data import archived, make_config, offload, rows, write_history
from tests.rlmm.restore.test_plan import plan

TOPIC = "s"
MAX = 1 << 20


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> RlmmConfig:
    """Partition 0: write_history's (transactions, two epochs, null keys and values);
    partition 1 (gzip): plain batches and two compacted ones (offset gaps)."""
    tmp = tmp_path_factory.mktemp("source")
    config = make_config(tmp / "rlmm")
    topic_id = uuid.uuid4()
    write_history(tmp / "logs", TOPIC, 0, "none", topic_id=topic_id)
    with PartitionDirWriter(
        tmp / "logs", TOPIC, 1, topic_id=topic_id, segment_records=60, compression="gzip"
    ) as w:
        w.append_records(generate_records(40), batch_records=10)
        w.append_batch(generate_records(4, start=40), offset_deltas=[0, 2, 3, 7])
        w.append_records(generate_records(30, start=44), batch_records=10)
        w.append_batch(generate_records(3, start=74), offset_deltas=[0, 5, 6])
        # Enough after them that the segment holding the second one rolls (is archived).
        w.append_records(generate_records(70, start=77), batch_records=10)
    asyncio.run(offload(config, [PartitionDir(d) for d in sorted((tmp / "logs").iterdir())]))
    return config


def through_steps(
    restore: RestorePlan, *, passthrough: bool = True, max_bytes: int = MAX
) -> tuple[dict[int, list[tuple[Any, ...]]], Counter[str], int]:
    """Each partition's records as the writer would send them; the reasons of the
    batches re-encoded; how many batches passed through."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    reasons: Counter[str] = Counter()
    passed = 0
    for p in restore.partitions:
        got: list[tuple[Any, ...]] = []
        ends = []
        stream = partition_steps(p, passthrough=passthrough, max_bytes=max_bytes)
        try:
            for steps in stream:
                for step in steps:
                    if isinstance(step, Passthrough):
                        passed += 1
                        batch = DefaultRecordBatch(step.data)
                        assert batch.validate_crc()
                        got += [
                            (r.offset, r.key, r.value, tuple(r.headers), r.timestamp, 0)
                            for r in batch
                        ]
                    elif isinstance(step, Records):
                        reasons += step.reasons
                        got += [(o, k, v, tuple(h), ts, t) for o, k, v, ts, t, h in step.rows]
                    else:
                        assert isinstance(step, SliceEnd)
                        ends.append(step.until_offset)
        finally:
            stream.close()
        assert ends == [s.until_offset for s in p.slices]
        out[p.source.partition] = got
    return out, reasons, passed


def read(restore: RestorePlan) -> dict[int, list[tuple[Any, ...]]]:
    return {
        p.source.partition: [r for s in p.slices for r in rows(read_slice(s))]
        for p in restore.partitions
    }


def test_whole_batches_pass_through_and_compacted_ones_are_decoded(archive: RlmmConfig) -> None:
    whole = plan(archive, RestoreSelection(TOPIC))
    got, reasons, passed = through_steps(whole)
    assert got == read(whole)
    assert sum(map(len, got.values())) > 500
    assert reasons == {OFFSET_GAPS: 2}
    assert passed > 40
    # Partition 1's compacted batches: the offsets kept, the gaps between skipped.
    offsets = [r[0] for r in got[1]]
    assert offsets[38:46] == [38, 39, 40, 42, 43, 47, 48, 49]


def test_batches_across_a_range_end_or_a_resume_point_are_decoded(archive: RlmmConfig) -> None:
    ranged = plan(archive, RestoreSelection(TOPIC, partitions=(0,), from_offset=5, to_offset=395))
    got, reasons, passed = through_steps(ranged)
    assert got == read(ranged) and [r[0] for r in got[0]][:2] == [5, 6]
    assert reasons == {BOUNDARY: 2} and passed > 10
    resumed = plan(archive, RestoreSelection(TOPIC), resume={0: 5, 1: 13})
    got, reasons, _ = through_steps(resumed)
    assert got == read(resumed) and got[0][0][0] == 5 and got[1][0][0] == 13
    assert reasons == {BOUNDARY: 2, OFFSET_GAPS: 2}


def test_without_passthrough_or_above_the_size_every_batch_is_decoded(
    archive: RlmmConfig,
) -> None:
    whole = plan(archive, RestoreSelection(TOPIC))
    want = read(whole)
    got, reasons, passed = through_steps(whole, passthrough=False)
    assert got == want and passed == 0 and set(reasons) == {PARTITIONER}
    got, reasons, passed = through_steps(whole, max_bytes=61)  # a header alone
    assert got == want and passed == 0 and set(reasons) == {TOO_LARGE, OFFSET_GAPS}


def test_the_refusals(archive: RlmmConfig) -> None:
    whole = plan(archive, RestoreSelection(TOPIC, partitions=(0,)))
    piece = whole.partitions[0].slices[0]
    header, _ = min(read_slice_batches(piece), key=lambda batch: batch[0].base_offset)
    assert passthrough_refusal(header, piece, MAX) is None
    assert passthrough_refusal(header, piece, header.size_in_bytes - 1) == TOO_LARGE
    lat = header._replace(attributes=header.attributes | 0x08)
    assert passthrough_refusal(lat, piece, MAX) == LOG_APPEND_TIME
    horizon = header._replace(attributes=header.attributes | 0x40)
    assert passthrough_refusal(horizon, piece, MAX) == ATTRIBUTES
    assert passthrough_refusal(header._replace(magic=1), piece, MAX) == ATTRIBUTES
    gapped = header._replace(last_offset=header.last_offset + 1)
    assert passthrough_refusal(gapped, piece, MAX) == OFFSET_GAPS
    early = header._replace(base_offset=piece.from_offset - 1)
    assert passthrough_refusal(early, piece, MAX) == BOUNDARY


def test_archived_records_are_what_the_plan_held(archive: RlmmConfig, tmp_path: Path) -> None:
    # The history's archived committed records, as write_history wrote them.
    _, written = write_history(tmp_path, TOPIC, 0, "none")
    want = [
        (e.offset, e.key, e.value, tuple(e.headers), e.timestamp, 0)
        for e in archived(PartitionDir(tmp_path / f"{TOPIC}-0"), written)
        if not e.aborted
    ]
    got, _, _ = through_steps(plan(archive, RestoreSelection(TOPIC, partitions=(0,))))
    assert got[0] == want
