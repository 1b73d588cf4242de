"""Bad local segments: the segment is not copied, the error names the file, others go on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remote.local import LocalRemoteStorageManager
from remote.segments import PartitionDir
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.offload import RemoteLogManager
from rlmm.offload.display import Display
from tests.rlmm.offload.conftest import check_invariants, local_keys, source, write_partition


def truncate(pdir: PartitionDir) -> Path:
    path = pdir.segments()[1].log_path
    path.write_bytes(path.read_bytes()[:-7])
    return path


def corrupt(pdir: PartitionDir) -> Path:
    path = pdir.segments()[1].log_path
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: only the CRC can tell
    path.write_bytes(bytes(data))
    return path


def drop_index(pdir: PartitionDir) -> Path:
    path = pdir.segments()[1].offset_index_path
    path.unlink()
    return path


def drop_snapshot(pdir: PartitionDir) -> Path:
    nxt = pdir.segments()[2].base_offset
    path = pdir.path / f"{nxt:020d}.snapshot"
    path.unlink()
    return path


@pytest.mark.parametrize("damage", [truncate, corrupt, drop_index, drop_snapshot])
async def test_bad_segment_is_not_copied_and_named(
    tmp_path: Path,
    damage: Callable[[PartitionDir], Path],
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    bad = write_partition(tmp_path, "orders", 0)
    good = write_partition(tmp_path, "orders", 1)
    path = damage(bad)
    display = Display(rich=False)
    rlm = make_rlm(listener=display.event)
    await rlm.on_leadership_changes([source(bad), source(good)], start_tasks=False)
    results = await rlm.run_round()
    # every copy attempt, failed ones too, ended: no idle time is counted as copying
    assert display.tally.copying == 0
    bad_copy, _ = results[bad.topic_id_partition()]
    good_copy, _ = results[good.topic_id_partition()]
    assert bad_copy.error is not None
    assert path.name in str(bad_copy.error)
    # the segment before the bad one is copied, nothing after it (no hole in the lineage)
    assert [m.start_offset for m in bad_copy.copied] == [0]
    assert bad_copy.pending == len(bad.segments()) - 2
    assert good_copy.error is None and len(good_copy.copied) == len(good.segments()) - 1
    check_invariants(rlmm_manager, rsm, [bad, good], local_keys(rsm.root))
    assert rlm.metrics.copy_errors.labels("orders")._value.get() >= 1
