"""The sidecar's use of the process housekeeping (rlmm.process): the heap frozen after
its first round and given back at stop, glibc's malloc bounded at start and trimmed
after every round, and what both cost on its /metrics. The parts themselves are
checked in tests/rlmm/process."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path

import pytest

from rlmm.offload.display import Display
from rlmm.offload.sidecar import Sidecar
from rlmm.process.native_memory import SWITCH_ENV, _glibc
from tests.rlmm.offload.conftest import one_partition_sidecar

glibc_only = pytest.mark.skipif(_glibc() is None, reason="glibc's malloc is not the allocator")


async def test_the_sidecar_freezes_after_its_first_round_and_thaws_at_stop(
    tmp_path: Path,
) -> None:
    config, logs = one_partition_sidecar(tmp_path, '"remote.log.manager.task.interval.ms" = 100\n')
    sidecar = Sidecar(config, [logs], display=Display(rich=False))
    run = asyncio.create_task(sidecar.run())
    try:
        async with asyncio.timeout(60):
            while not sidecar.long_lived.frozen:
                assert not run.done(), run.result()
                await asyncio.sleep(0.02)
        registry = sidecar.metrics.registry
        frozen = sidecar.long_lived.frozen_count
        assert registry.get_sample_value("rlmm_python_gc_frozen_objects") == frozen
        assert frozen > 1000  # the imports and the partition's state
        assert registry.get_sample_value("rlmm_python_gc_refreezes_total") == 0
    finally:
        sidecar.stop()
        report = await asyncio.wait_for(run, 60)
    assert report.rounds >= 1 and report.tally.copied > 0
    assert not sidecar.long_lived.frozen and gc.get_freeze_count() == 0


@glibc_only
async def test_the_sidecar_bounds_at_start_and_trims_after_each_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    config, logs = one_partition_sidecar(tmp_path)
    sidecar = Sidecar(config, [logs], once=True, display=Display(rich=False))
    hooks = len(gc.callbacks)
    report = await sidecar.run()
    assert report.rounds == 1 and report.tally.copied > 0
    assert sidecar.native_memory.trims == report.rounds
    # on /metrics (rlmm.process.runtime_costs), and the gc hook gone once stopped
    registry = sidecar.metrics.registry
    assert registry.get_sample_value("rlmm_offload_malloc_trims_total") == report.rounds
    assert registry.get_sample_value("rlmm_offload_malloc_trim_seconds_total") >= 0
    for generation in "012":
        labels = {"generation": generation}
        assert registry.get_sample_value("rlmm_python_gc_seconds_total", labels) is not None
    assert len(gc.callbacks) == hooks
    assert registry.get_sample_value("process_resident_memory_bytes") > 0
    assert registry.get_sample_value("process_open_fds") > 0
    assert registry.get_sample_value("process_start_time_seconds") > 0  # (an alert reads it)
    # (an operator's MALLOC_* in this environment would be left alone)
    expected = {"MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"} - set(os.environ)
    assert set(sidecar.native_memory.bounded) == expected
