"""The README's quickstart runs as written and leaves nothing open (warnings are errors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_clean(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", "examples/quickstart.py", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "after restart: COPY_SEGMENT_FINISHED" in result.stdout
    assert "restored from snapshot: True" in result.stdout
    assert "Unclosed" not in result.stderr and "was not closed" not in result.stderr
