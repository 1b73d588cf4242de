"""The demo's end-to-end path (real segments -> RLMM -> local remote storage -> restart)."""

from __future__ import annotations

from pathlib import Path

from rlmm.config import load_config
from rlmm.demo import ROOT, offload, write_partition


async def test_demo_offloads_serves_and_restarts(tmp_path: Path) -> None:
    config = load_config(
        ROOT / "config" / "embedded.toml", env={}, overrides={"data_dir": str(tmp_path)}
    )
    pdir = write_partition(tmp_path / "kafka-logs")
    result = await offload(config, pdir)
    assert result["segments copied"] == len(pdir.segments()) - 1 >= 3
    assert result["state after restart identical"] is True
    assert result["segment with aborted txns"] is not None
    assert "0 events replayed" in str(result["restart from snapshot"])
