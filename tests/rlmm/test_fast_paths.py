"""RLMM_NO_FAST_PATHS: with it set every fast path of the core loads its plain-Python
branch, and the tests of the code that runs them pass on those branches too: the cache
and codec tests, the manager's and the archive's (the CI pass that proves both copies
equal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# Each pass: the tests of code that runs the fast paths (the codec's model builders and
# uuids, the cache's objects and blocks), less those that add only a transport (brokers,
# S3, Spark) or a fuzzer of other code, whose paths the others already take.
PASSES = {
    "cache and codec": ["tests/rlmm/cache", "tests/rlmm/codec"],
    "manager": sorted(
        str(p.relative_to(ROOT))
        for pattern in ("tests/rlmm/test_manager*.py", "tests/rlmm/test_replay.py")
        for p in ROOT.glob(pattern)
    ),
    "archive": ["tests/rlmm/archive", "--ignore=tests/rlmm/archive/test_fuzz_batches.py"],
}
LEFT_OUT = "not kafka and not apache_kafka and not s3 and not spark and not slow"


@pytest.mark.slow  # a pytest run of its own: handed out first
@pytest.mark.parametrize("tests", PASSES.values(), ids=PASSES.keys())
def test_the_tests_pass_on_the_slow_paths(tests: list[str]) -> None:
    args = ["-m", "pytest", *tests, "-m", LEFT_OUT, "-q", "-p", "no:cacheprovider"]
    done = run(args, "1", 280)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
