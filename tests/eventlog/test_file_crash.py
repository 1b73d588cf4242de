"""Crash safety of FileEventLog: SIGKILL a writer at random moments, reopen, verify.

A child process appends with fsync="always" from many tasks and prints every
acknowledged (partition, offset, sha256) right after the ack; the parent kills it at a
random moment, sometimes appends garbage to a tail segment (a torn write), reopens the
log and checks that every acknowledged offset is there with identical bytes, offsets
are dense, and the damage was truncated and counted. The same dir is reused across
rounds, so recovery also has to leave a log that keeps working.

Invariant: the seed is printed in every failure message, so a failing run replays.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from eventlog.file import FileEventLog
from tests.eventlog.conftest import collect, run_and_sigkill

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_file_child.py")
PARTITIONS = 4
ROUNDS = 25


async def run_and_kill(directory: Path, seed: int, run_for: float) -> list[str]:
    """Start the crashing writer, let it append for ``run_for`` s, SIGKILL it; its lines."""
    return await run_and_sigkill(
        CHILD, ["crash", str(directory), str(PARTITIONS), str(seed)], run_for
    )


def tear_tail(directory: Path, rng: random.Random) -> int:
    """Append junk to the last segment of a random partition; the bytes added."""
    pdir = directory / f"__remote_log_metadata-{rng.randrange(PARTITIONS)}"
    tail = sorted(pdir.glob("*.log"))[-1]
    junk = rng.randbytes(rng.randrange(1, 300))
    with open(tail, "ab") as f:
        f.write(junk)
    return len(junk)


@pytest.mark.slow
async def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    master_seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(master_seed)
    acked: dict[tuple[int, int], str] = {}
    for round_no in range(ROUNDS):
        where = f"seed {master_seed}, round {round_no}"
        lines = await run_and_kill(tmp_path, rng.randrange(2**31), rng.uniform(0.02, 0.3))
        for line in lines:
            fields = line.split()
            key = (int(fields[0]), int(fields[1]))
            assert key not in acked, f"{where}: offset {key} acknowledged twice"
            acked[key] = fields[2]
        # Every third round for sure, others by chance: torn tails must be common.
        injected = tear_tail(tmp_path, rng) if round_no % 3 == 1 or rng.random() < 0.2 else 0
        async with FileEventLog(tmp_path, PARTITIONS) as log:
            assert log.stats.truncated_bytes >= injected, where
            if injected:
                assert log.stats.truncated_segments >= 1, where
            ends = await log.end_offsets(range(PARTITIONS))
            for p in range(PARTITIONS):
                records = await collect(log, p, 0, ends[p])
                assert [o for o, _ in records] == list(range(ends[p])), f"{where}: not dense"
                stored = {o: hashlib.sha256(v).hexdigest() for o, v in records}
                for (q, at), digest in acked.items():
                    if q == p:
                        assert stored.get(at) == digest, f"{where}: lost {p}/{at}"
    assert len(acked) > ROUNDS, f"seed {master_seed}: the child hardly appended anything"
