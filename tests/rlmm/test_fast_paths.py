"""RLMM_NO_FAST_PATHS: with it set every fast path of the core loads its plain-Python
branch, and the cache and codec tests pass on those branches too (the CI pass that
proves both copies equal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLAGS = """
from rlmm.cache import _block, _columns
from rlmm.codec import FAST_BUILD, FAST_UUID
print(FAST_BUILD, FAST_UUID, _columns.FAST_OBJECTS, _block.FAST_BLOCKS,
      _columns.SegmentColumns.metadata is _columns.SegmentColumns.metadata_by_constructors)
"""


def run(args: list[str], switch: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RLMM_NO_FAST_PATHS"}
    if switch is not None:
        env["RLMM_NO_FAST_PATHS"] = switch
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_switch_turns_every_fast_path_off() -> None:
    assert run(["-c", FLAGS], None, 60).stdout.split() == ["True"] * 4 + ["False"]
    assert run(["-c", FLAGS], "0", 60).stdout.split() == ["True"] * 4 + ["False"]
    assert run(["-c", FLAGS], "1", 60).stdout.split() == ["False"] * 4 + ["True"]


def test_the_cache_and_codec_tests_pass_on_the_slow_paths() -> None:
    tests = ["tests/rlmm/cache", "tests/rlmm/codec"]
    done = run(["-m", "pytest", *tests, "-q", "-p", "no:cacheprovider"], "1", 280)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
