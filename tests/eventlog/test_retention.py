"""FileEventLog retention: whole segments below every owner's claimed floor go, never more.

Covers the claim registry on disk, deletion and its limits (active segment, lagging
owners, unreadable claims), readers below the log start (in process, read-only
followers), restarts, and SIGKILL of a writer while it deletes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from pathlib import Path

import pytest

from eventlog import OffsetBeforeLogStartError
from eventlog._log_dir import stored_start_offsets
from eventlog.errors import EventLogConfigError
from eventlog.file import FileEventLog
from tests.eventlog.conftest import collect, run_and_sigkill

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_retention_child.py")


async def fill(log: FileEventLog, partition: int, count: int) -> list[bytes]:
    values = [f"event-{partition}-{i:06d}-".encode() * 4 for i in range(count)]
    for value in values:
        await log.append(partition, value)
    return values


def segment_files(directory: Path, partition: int) -> list[str]:
    return sorted(p.name for p in (directory / f"__remote_log_metadata-{partition}").iterdir())


async def test_no_claim_deletes_nothing(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 300)
        assert await log.enforce_retention() == 0
        assert (await log.start_offsets([0]))[0] == 0
        assert len(log._parts[0].segments) > 5


async def test_deletes_whole_segments_below_the_floor_only(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 2, segment_bytes=1024) as log:
        values = await fill(log, 0, 300)
        await fill(log, 1, 50)
        bases = [s.base_offset for s in log._parts[0].segments]
        floor = 137
        await log.register_retention("broker-0", {0: floor, 1: 10**6}, {"snapshot": "s-1"})
        start = (await log.start_offsets([0]))[0]
        # The segment holding the floor survives; every one entirely below it is gone.
        assert start == max(b for b in bases if b <= floor)
        assert start > 0 and log.stats.retention_deleted_segments > 0
        assert log.stats.retention_deleted_bytes > 0
        records = await collect(log, 0, start, 300 - start)
        assert records == list(enumerate(values))[start:]
        # Partition 1: the floor is past the end, yet the active segment stays.
        assert len(log._parts[1].segments) == 1
        assert (await log.end_offsets([1]))[1] == 50
        # No stray index files of deleted segments.
        names = segment_files(tmp_path, 0)
        assert all(int(n[:20]) >= start for n in names)


async def test_read_below_log_start_names_partition_offsets_and_snapshot(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 200)
        await log.register_retention("broker-7", {0: 150}, {"snapshot": "snap-42"})
        start = (await log.start_offsets([0]))[0]
        with pytest.raises(OffsetBeforeLogStartError) as info:
            await collect(log, 0, 3, 1)
        error = info.value
        assert (error.partition, error.requested, error.log_start) == (0, 3, start)
        assert error.start_from == {"broker-7": {"snapshot": "snap-42"}}
        message = str(error)
        for part in ("partition 0", "offset 3", f"starts at {start}", "broker-7", "snap-42"):
            assert part in message


async def test_a_lagging_owner_holds_retention_back(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 300)
        await log.register_retention("archive-view", {0: 20})
        await log.register_retention("broker-0", {0: 290})
        held = (await log.start_offsets([0]))[0]
        assert held <= 20
        # The lagging owner moves on: the next safe point deletes up to the new minimum.
        await log.register_retention("archive-view", {0: 250})
        moved = (await log.start_offsets([0]))[0]
        assert held < moved <= 250
        # An owner that says nothing about a partition needs all of it.
        await log.register_retention("newcomer", {})
        await fill(log, 0, 100)
        await log.register_retention("broker-0", {0: 390})
        await log.register_retention("archive-view", {0: 380})
        assert (await log.start_offsets([0]))[0] == moved
        assert await log.unregister_retention("newcomer")
        assert not await log.unregister_retention("newcomer")
        assert await log.enforce_retention() > 0
        assert (await log.start_offsets([0]))[0] > moved


async def test_an_unreadable_claim_holds_the_whole_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 200)
        (tmp_path / "retention").mkdir()
        (tmp_path / "retention" / "broken.json").write_text("{not json")
        await log.register_retention("broker-0", {0: 190})
        assert (await log.start_offsets([0]))[0] == 0
        assert "broken.json" in caplog.text


async def test_bad_claims_are_refused(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 2) as log:
        with pytest.raises(EventLogConfigError, match="owner"):
            await log.register_retention("../escape", {0: 1})
        with pytest.raises(EventLogConfigError, match="partition 0 floor"):
            await log.register_retention("b", {0: -1})
        with pytest.raises(EventLogConfigError, match="not JSON"):
            await log.register_retention("b", {0: 1}, {"x": object()})
        assert not (tmp_path / "retention" / "b.json").exists()


async def test_retention_survives_restart_and_the_log_keeps_working(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        values = await fill(log, 0, 300)
        await log.register_retention("broker-0", {0: 200})
        start = (await log.start_offsets([0]))[0]
    assert stored_start_offsets(tmp_path, 1) == {0: start}
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        assert (await log.start_offsets([0]))[0] == start
        assert await log.append(0, b"after restart") == 300
        records = await collect(log, 0, start, 301 - start)
        assert [v for _, v in records] == [*values[start:], b"after restart"]


async def test_claims_written_while_closed_apply_on_start(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 300)
    # Another process (say, an operator tool) registers while the writer is down.
    async with FileEventLog(tmp_path, 1, read_only=True) as reader:
        await reader.register_retention("broker-0", {0: 250})
        assert (await reader.start_offsets([0]))[0] == 0  # a reader never deletes
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        assert (await log.start_offsets([0]))[0] > 200


async def test_in_process_reader_below_the_new_start_gets_the_error(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 300)
    # Reopened: the in-memory tail is empty, so the reader goes segment by segment.
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        reader = log.read_batches(0, 0)
        try:
            async with asyncio.timeout(20):
                first = await anext(reader)  # positioned in the first segment
                assert first[0][0] == 0 and first[-1][0] < 100
                await log.register_retention("broker-0", {0: 280})
                with pytest.raises(OffsetBeforeLogStartError) as info:
                    while True:
                        await anext(reader)
        finally:
            await reader.aclose()
        assert info.value.requested == first[-1][0] + 1
        assert info.value.requested < info.value.log_start


async def test_read_only_follower_sees_the_deletion(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        values = await fill(log, 0, 300)
        async with FileEventLog(tmp_path, 1, read_only=True, poll_interval_ms=10) as follower:
            assert await collect(follower, 0, 0, 5) == list(enumerate(values[:5]))
            await log.register_retention("broker-0", {0: 250})
            start = (await log.start_offsets([0]))[0]
            assert (await follower.start_offsets([0]))[0] == start
            with pytest.raises(OffsetBeforeLogStartError):
                await collect(follower, 0, 0, 1)
            assert await collect(follower, 0, start, 300 - start) == list(enumerate(values))[start:]
            # It still follows new appends.
            await log.append(0, b"new")
            assert await collect(follower, 0, 300, 1) == [(300, b"new")]


async def test_follower_whose_known_segments_all_went(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=1024) as log:
        await fill(log, 0, 20)
        async with FileEventLog(tmp_path, 1, read_only=True, poll_interval_ms=10) as follower:
            await follower.end_offsets([0])
            values = await fill(log, 0, 400)
            await log.register_retention("broker-0", {0: 400})
            start = (await follower.start_offsets([0]))[0]
            assert start > 20
            got = await collect(follower, 0, start, 420 - start)
            assert [v for _, v in got] == values[start - 20 :]


# ---- SIGKILL during deletion ----------------------------------------------------------


async def run_and_kill(directory: Path, partitions: int, seed: int, run_for: float) -> list[str]:
    return await run_and_sigkill(CHILD, [str(directory), str(partitions), str(seed)], run_for)


@pytest.mark.slow
async def test_sigkill_during_deletion_loses_nothing_above_the_claims(tmp_path: Path) -> None:
    partitions = 3
    master_seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(master_seed)
    acked: dict[tuple[int, int], str] = {}
    deleted_any = False
    for round_no in range(12):
        where = f"seed {master_seed}, round {round_no}"
        lines = await run_and_kill(
            tmp_path, partitions, rng.randrange(2**31), rng.uniform(0.2, 0.8)
        )
        claimed: dict[int, int] = {}
        for line in lines:
            kind, p, offset, *rest = line.split()
            if kind == "ack":
                acked[(int(p), int(offset))] = rest[0]
            else:
                claimed[int(p)] = int(offset)
        # The floors on disk now (the newest claim that made it, atomically).
        async with FileEventLog(tmp_path, partitions, segment_bytes=1024) as log:
            claims = await log.retention_claims()
            assert not claims.problems, where
            starts = await log.start_offsets(range(partitions))
            ends = await log.end_offsets(range(partitions))
            for p in range(partitions):
                floor = claims.floor(p)
                assert claimed.get(p, 0) <= floor, where  # a returned claim is durable
                # Never more than the claim allows; whole segments at most.
                assert starts[p] <= floor, (where, p, starts[p], floor)
                deleted_any |= starts[p] > 0
                expected = {o: h for (q, o), h in acked.items() if q == p and o >= starts[p]}
                got = await collect(log, p, starts[p], ends[p] - starts[p])
                assert [o for o, _ in got] == list(range(starts[p], ends[p])), where
                for offset, value in got:
                    if offset in expected:
                        assert hashlib.sha256(value).hexdigest() == expected[offset], where
                assert set(expected) <= {o for o, _ in got}, where
                names = segment_files(tmp_path, p)
                logs = {n[:20] for n in names if n.endswith(".log")}
                assert all(n[:20] in logs for n in names if n.endswith(".index")), where
    assert deleted_any, f"seed {master_seed}: no round deleted anything"
