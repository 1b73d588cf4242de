"""FileEventLog beyond the contract: on-disk format, segments and index, locking,
read-only followers, recovery of torn tails, corruption, group commit, bad config.

Invariant: format checks use kafka-python as an independent decoder, never our own.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventlog import (
    EventLogConfigError,
    EventLogCorruptError,
    EventLogLockedError,
    EventLogReadOnlyError,
)
from eventlog._partition import TAIL_RECORDS
from eventlog.errors import EventLogStorageError
from eventlog.file import FileEventLog
from tests.eventlog.conftest import collect

# kafka-python 3.0 imports its whole client on `import kafka`, which calls the
# deprecated importlib.resources.read_text; warnings are errors here, so import quietly.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_file_child.py")


def part_dir(root: Path, p: int = 0) -> Path:
    return root / f"__remote_log_metadata-{p}"


def segments(root: Path, p: int = 0) -> list[Path]:
    return sorted(part_dir(root, p).glob("*.log"))


def kafka_batches(path: Path) -> Iterator[object]:
    """RecordBatches of a segment as kafka-python decodes them (CRC checked)."""
    records = MemoryRecords(path.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"{path}: batch at {batch.base_offset} fails CRC"
        yield batch


def spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


async def wait_line(child: subprocess.Popen[str], expected: str) -> None:
    assert child.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 20)
    assert line.strip() == expected, f"child said {line!r} (exit {child.poll()})"


def finish(child: subprocess.Popen[str]) -> None:
    child.communicate(timeout=20)  # closes stdin: the child exits cleanly
    assert child.returncode == 0


async def test_segments_are_kafka_record_batches(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 2) as log:
        await log.append(1, b"v0", key=b"k0")
        await log.append_batch(1, [b"v1", b"v2", b"v3"])
        await log.append(1, b"v4")
    [segment] = segments(tmp_path, 1)
    assert segment.name == "00000000000000000000.log"
    batches = list(kafka_batches(segment))
    assert [b.base_offset for b in batches] == [0, 1, 4]  # type: ignore[attr-defined]
    records = [(r.offset, r.key, r.value) for b in batches for r in b]  # type: ignore[attr-defined]
    assert records == [
        (0, b"k0", b"v0"),
        (1, None, b"v1"),
        (2, None, b"v2"),
        (3, None, b"v3"),
        (4, None, b"v4"),
    ]
    assert json.loads((tmp_path / "eventlog.json").read_text())["partitions"] == 2


async def test_segments_roll_and_reads_cross_them(tmp_path: Path) -> None:
    values = [f"record-{i:04d}".encode() * 10 for i in range(300)]
    async with FileEventLog(tmp_path, 1, segment_bytes=4096, index_interval_bytes=512) as log:
        for v in values:
            await log.append(0, v)
        files = segments(tmp_path)
        assert len(files) > 5 and log.stats.rolls == len(files) - 1
        assert all(f.stat().st_size <= 4096 for f in files)
        # Each segment is named after its first offset, and offsets continue across files.
        expected_next = 0
        for f in files:
            batches = list(kafka_batches(f))
            assert int(f.stem) == batches[0].base_offset == expected_next  # type: ignore[attr-defined]
            expected_next = batches[-1].last_offset + 1  # type: ignore[attr-defined]
        assert expected_next == 300
        assert await collect(log, 0, 0, 300) == list(enumerate(values))
        assert await collect(log, 0, 171, 129) == list(enumerate(values))[171:]
    async with FileEventLog(tmp_path, 1, segment_bytes=4096) as log:
        assert await collect(log, 0, 250, 50) == list(enumerate(values))[250:]


async def test_sealed_index_is_kafka_format(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=8192, index_interval_bytes=256) as log:
        for i in range(200):
            await log.append(0, b"x" * 100 + str(i).encode())
    first = segments(tmp_path)[0]
    data = first.read_bytes()
    entries = list(struct.iter_unpack(">ii", first.with_suffix(".index").read_bytes()))
    assert len(entries) > 5
    for relative, position in entries:
        # Kafka's rule: the entry names the last offset of the batch at that position.
        batch = next(kafka_batches_at(data, position))
        assert batch.last_offset == int(first.stem) + relative  # type: ignore[attr-defined]


def kafka_batches_at(data: bytes, position: int) -> Iterator[object]:
    records = MemoryRecords(data[position:])
    while records.has_next():
        yield records.next_batch()


async def test_reads_seek_by_index_instead_of_scanning(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=4096, index_interval_bytes=256) as log:
        for i in range(200):
            await log.append(0, f"{i:03d}".encode() * 20)
        first = segments(tmp_path)[0]
        last_segment_start = int(segments(tmp_path)[-1].stem)
        # Damage the first segment: a read from offset 0 must notice ...
        with open(first, "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
        # (read through a second, read-only handle: the writer's own readers are served
        # the acknowledged tail from memory and would not touch the disk at all)
        async with FileEventLog(
            tmp_path, 1, segment_bytes=4096, index_interval_bytes=256, read_only=True
        ) as reader:
            with pytest.raises(EventLogCorruptError):
                await collect(reader, 0, 0, 1)
            # ... while a read from a later offset never touches it.
            got = await collect(reader, 0, last_segment_start, 200 - last_segment_start)
        assert got[0][0] == last_segment_start
        active = log._parts[0].active
        assert active.index.lookup(199) > 0  # the sparse index has entries to seek by


async def test_the_writer_keeps_a_bounded_tail_and_older_reads_go_to_disk(
    tmp_path: Path,
) -> None:
    """The writer keeps only the newest TAIL_RECORDS acknowledged records in memory for
    its in-process followers (it is a sidecar's memory for good); a reader from before
    them reads the disk and gets the same records."""
    n = TAIL_RECORDS * 2 + 7
    async with FileEventLog(tmp_path, 1) as log:
        await asyncio.gather(*(log.append(0, b"v%d" % i) for i in range(n)))
        tail = log._parts[0].tail
        assert len(tail) == TAIL_RECORDS and tail[0][0] == n - TAIL_RECORDS
        assert log._parts[0].tail_from(n - TAIL_RECORDS - 1) is None  # not in memory
        got = await collect(log, 0, 0, n)
    assert got == [(i, b"v%d" % i) for i in range(n)]


async def test_missing_or_bad_index_is_rebuilt_on_open(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=2048) as log:
        await log.append_batch(0, [b"a" * 300 for _ in range(3)])
        for i in range(30):
            await log.append(0, b"b" * 300 + bytes([i]))
    files = segments(tmp_path)
    files[0].with_suffix(".index").unlink()
    files[1].with_suffix(".index").write_bytes(b"\x00\x00\x00\x09\x7f\xff\xff\xff")
    async with FileEventLog(tmp_path, 1, segment_bytes=2048) as log:
        assert [o for o, _ in await collect(log, 0, 2, 31)] == list(range(2, 33))


async def test_second_writer_process_gets_locked_error(tmp_path: Path) -> None:
    child = spawn("hold", str(tmp_path), "2")
    try:
        await wait_line(child, "ready")
        with pytest.raises(EventLogLockedError, match=str(tmp_path)) as info:
            await FileEventLog(tmp_path, 2).start()
        assert str(child.pid) in str(info.value)
        assert info.value.holder == str(child.pid) and info.value.dir == str(tmp_path)
        assert "read-only" in str(info.value) and "read_only=True" not in str(info.value)
        # A read-only reader does not need the lock.
        async with FileEventLog(tmp_path, 2, read_only=True) as reader:
            assert await reader.end_offsets([0, 1]) == {0: 0, 1: 0}
    finally:
        finish(child)
    async with FileEventLog(tmp_path, 2) as log:  # the lock died with its owner
        assert await log.append(0, b"mine") == 0


async def test_second_writer_in_the_same_process_is_locked_out(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1):
        with pytest.raises(EventLogLockedError):
            await FileEventLog(tmp_path, 1).start()


async def test_read_only_reader_follows_a_writer_process(tmp_path: Path) -> None:
    child = spawn("write", str(tmp_path), "1", "150")
    try:
        await wait_line(child, "ready")
        async with FileEventLog(tmp_path, 1, read_only=True, poll_interval_ms=20) as reader:
            got = await collect(reader, 0, 0, 150, timeout=30)
            assert [o for o, _ in got] == list(range(150))
            assert all(v == f"record-{o:05d}-".encode() * 8 for o, v in got)
            assert await reader.end_offsets([0]) == {0: 150}
            with pytest.raises(EventLogReadOnlyError, match=str(tmp_path)):
                await reader.append(0, b"nope")
        await wait_line(child, "done")
        assert len(segments(tmp_path)) > 3  # it followed across segment rolls
    finally:
        finish(child)


async def test_read_only_in_process_follows_and_never_repairs(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1) as writer:
        await writer.append(0, b"one")
        async with FileEventLog(tmp_path, 1, read_only=True, poll_interval_ms=10) as reader:
            follow = asyncio.create_task(collect(reader, 0, 0, 3))
            await writer.append_batch(0, [b"two", b"three"])
            assert [v for _, v in await follow] == [b"one", b"two", b"three"]
    tail = segments(tmp_path)[-1]
    with open(tail, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x01")  # a torn batch header
    size = tail.stat().st_size
    async with FileEventLog(tmp_path, 1, read_only=True) as reader:
        assert await reader.end_offsets([0]) == {0: 3}
    assert tail.stat().st_size == size


async def test_torn_tail_is_truncated_and_counted(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 2) as log:
        for i in range(10):
            await log.append(1, f"keep-{i}".encode())
    tail = segments(tmp_path, 1)[-1]
    good = tail.stat().st_size
    async with FileEventLog(tmp_path, 2) as log:
        assert log.stats.truncated_bytes == 0
        await log.append(1, b"torn" * 50)
    with open(tail, "r+b") as f:  # cut the last batch in half: a torn write
        f.truncate(good + 100)
    async with FileEventLog(tmp_path, 2) as log:
        assert log.stats.truncated_bytes == 100
        assert log.stats.truncated_segments == 1
        assert tail.stat().st_size == good
        assert await log.end_offsets([1]) == {1: 10}
        assert await log.append(1, b"next") == 10
    with open(tail, "ab") as f:  # garbage after a whole batch
        f.write(os.urandom(37))
    async with FileEventLog(tmp_path, 2) as log:
        assert log.stats.truncated_bytes == 37
        got = await collect(log, 1, 0, 11)
        assert got == [*((i, f"keep-{i}".encode()) for i in range(10)), (10, b"next")]


async def test_empty_trailing_segment_is_dropped(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1) as log:
        await log.append_batch(0, [b"a", b"b"])
    stray = part_dir(tmp_path) / f"{2:020d}.log"
    stray.touch()
    async with FileEventLog(tmp_path, 1) as log:
        assert not stray.exists() or stray.stat().st_size > 0
        assert await log.append(0, b"c") == 2
        assert [v for _, v in await collect(log, 0, 0, 3)] == [b"a", b"b", b"c"]


async def test_flipped_byte_in_sealed_segment_raises_corrupt(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, segment_bytes=2048) as log:
        for i in range(60):
            await log.append(0, f"value-{i:03d}".encode() * 6)
    sealed = segments(tmp_path)[0]
    batches = list(kafka_batches(sealed))
    # Flip a byte inside the third batch's records (after its 61-byte header).
    start = sum(b.size_in_bytes for b in batches[:2])  # type: ignore[attr-defined]
    with open(sealed, "r+b") as f:
        f.seek(start + 70)
        byte = f.read(1)
        f.seek(start + 70)
        f.write(bytes([byte[0] ^ 0x01]))
    async with FileEventLog(tmp_path, 1, segment_bytes=2048) as log:
        with pytest.raises(EventLogCorruptError) as info:
            await collect(log, 0, 0, 60)
        assert info.value.path == str(sealed)
        assert info.value.position == start
        assert str(sealed) in str(info.value) and f"byte {start}" in str(info.value)


async def test_corruption_in_the_middle_of_the_tail_segment_is_not_truncated(
    tmp_path: Path,
) -> None:
    async with FileEventLog(tmp_path, 1) as log:
        for i in range(5):
            await log.append(0, f"acknowledged-{i}".encode())
    (tmp_path / ".clean-shutdown").unlink()  # a crash: the open recovers the tail
    tail = segments(tmp_path)[-1]
    size = tail.stat().st_size
    with open(tail, "r+b") as f:
        f.seek(70)  # inside the first batch's record
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(EventLogCorruptError, match="refusing to truncate") as info:
        await FileEventLog(tmp_path, 1).start()
    assert info.value.position == 0
    assert tail.stat().st_size == size  # nothing acknowledged was cut
    # The failed open released the lock: a second try fails the same way, not "locked".
    with pytest.raises(EventLogCorruptError):
        await FileEventLog(tmp_path, 1).start()


async def test_group_commit_gathers_racing_appends(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 4) as log:
        offsets = await asyncio.gather(*(log.append(i % 4, b"v" * 200) for i in range(256)))
        assert sorted(offsets) == sorted(list(range(64)) * 4)
        assert log.stats.records == 256
        assert log.stats.flushes <= 2
        # One write and one fsync per partition file per flush.
        assert log.stats.fsyncs <= 8 and log.stats.writes <= 8


async def test_without_group_commit_every_append_is_fsynced(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, group_commit=False) as log:
        await asyncio.gather(*(log.append(0, b"v") for _ in range(20)))
        assert log.stats.fsyncs == 20 and log.stats.flushes == 20


async def test_interval_fsync_acknowledges_then_syncs(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1, fsync="interval", fsync_interval_ms=20) as log:
        await asyncio.gather(*(log.append(0, b"v") for _ in range(10)))
        assert log.stats.fsyncs == 0
        for _ in range(200):
            if log.stats.fsyncs:
                break
            await asyncio.sleep(0.01)
        assert log.stats.fsyncs >= 1
        assert await log.end_offsets([0]) == {0: 10}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partitions": 0}, "partitions"),
        ({"partitions": -2}, "partitions"),
        ({"partitions": True}, "partitions"),
        ({"partitions": "3"}, "partitions"),
        ({"partitions": 1, "fsync": "sometimes"}, "fsync"),
        ({"partitions": 1, "segment_bytes": 10}, "segment_bytes"),
        ({"partitions": 1, "fsync_interval_ms": 0}, "fsync_interval_ms"),
    ],
)
def test_bad_config_is_rejected(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(EventLogConfigError, match=message):
        FileEventLog(tmp_path, **kwargs)  # type: ignore[arg-type]


async def test_bad_dirs_are_rejected(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a dir")
    with pytest.raises(EventLogConfigError, match="not a directory"):
        await FileEventLog(a_file, 1).start()
    with pytest.raises(EventLogConfigError, match="no event log"):
        await FileEventLog(tmp_path / "missing", 1, read_only=True).start()
    async with FileEventLog(tmp_path / "log", 3):
        pass
    with pytest.raises(EventLogConfigError, match="has 3 partitions, configured with 5"):
        await FileEventLog(tmp_path / "log", 5).start()
    with pytest.raises(EventLogConfigError, match="has 3 partitions"):
        await FileEventLog(tmp_path / "log", 2, read_only=True).start()
    (tmp_path / "log" / "eventlog.json").unlink()
    with pytest.raises(EventLogConfigError, match="partition dirs"):
        await FileEventLog(tmp_path / "log", 3).start()


async def test_follower_survives_writer_dropping_an_empty_segment(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1) as log:
        await log.append_batch(0, [b"a", b"b"])
    (part_dir(tmp_path) / f"{2:020d}.log").touch()  # a crash right after a roll
    async with FileEventLog(tmp_path, 1, read_only=True, poll_interval_ms=10) as reader:
        assert await collect(reader, 0, 0, 2) == [(0, b"a"), (1, b"b")]
        follow = asyncio.create_task(collect(reader, 0, 1, 3))
        async with FileEventLog(tmp_path, 1) as writer:  # drops the empty segment
            await writer.append_batch(0, [b"c", b"d"])
            assert await follow == [(1, b"b"), (2, b"c"), (3, b"d")]


async def test_concurrent_close_waits_for_the_drain(tmp_path: Path) -> None:
    log = FileEventLog(tmp_path, 1)
    await log.start()
    pending = [asyncio.create_task(log.append(0, b"v")) for _ in range(50)]
    await asyncio.sleep(0)
    await asyncio.gather(log.close(), log.close())
    assert sorted(await asyncio.gather(*pending)) == list(range(50))
    assert log.stats.records == 50


async def test_disk_failure_fails_appends_and_stops_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FileEventLog(tmp_path, 1) as log:
        await log.append(0, b"durable")

        def broken_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "injected I/O error")

        monkeypatch.setattr("eventlog._writer.os.fdatasync", broken_fsync)
        with pytest.raises(EventLogStorageError, match="injected I/O error") as info:
            await log.append(0, b"unknown outcome")
        assert str(tmp_path) in str(info.value)
        monkeypatch.undo()
        with pytest.raises(EventLogStorageError):  # no writes until reopened
            await log.append(0, b"refused")
        assert await log.end_offsets([0]) == {0: 1}  # readers keep the committed view
        assert await collect(log, 0, 0, 1) == [(0, b"durable")]
    async with FileEventLog(tmp_path, 1) as log:
        # The failed append's batch reached the file whole, so recovery keeps it: like a
        # Kafka produce timeout, a failed append's outcome is unknown, never half-applied.
        assert await log.end_offsets([0]) in ({0: 1}, {0: 2})
        end = (await log.end_offsets([0]))[0]
        assert await log.append(0, b"after reopen") == end


async def test_clean_close_marks_the_log_and_the_next_open_trusts_the_tail(
    tmp_path: Path,
) -> None:
    async with FileEventLog(tmp_path, 1) as log:
        for i in range(5):
            await log.append(0, b"x" * 100 + bytes([i]))
    marker = tmp_path / ".clean-shutdown"
    assert marker.exists()
    tail = segments(tmp_path, 0)[-1]
    data = bytearray(tail.read_bytes())
    data[-3] ^= 0xFF  # a payload byte of the last batch: only its CRC can tell
    tail.write_bytes(bytes(data))
    async with FileEventLog(tmp_path, 1) as log:
        assert not marker.exists()  # removed before the first append can happen
        # Kafka's rule: after a clean shutdown the tail is not CRC-checked on open;
        # like sealed segments, it is checked when read: nothing bad is served.
        assert log.stats.truncated_bytes == 0
        assert await log.end_offsets([0]) == {0: 5}
        with pytest.raises(EventLogCorruptError) as info:
            await collect(log, 0, 0, 5)
        assert info.value.path == str(tail)
    marker.unlink()  # as after a crash: no clean close recorded
    async with FileEventLog(tmp_path, 1) as log:
        assert log.stats.truncated_bytes > 0  # the full check finds the bad batch
        assert await log.end_offsets([0]) == {0: 4}


async def test_clean_marker_with_a_torn_tail_still_repairs(tmp_path: Path) -> None:
    async with FileEventLog(tmp_path, 1) as log:
        await log.append_batch(0, [b"a" * 50, b"b" * 50])
        await log.append(0, b"c" * 200)
    tail = segments(tmp_path, 0)[-1]
    with open(tail, "r+b") as f:
        f.truncate(tail.stat().st_size - 60)
    assert (tmp_path / ".clean-shutdown").exists()
    async with FileEventLog(tmp_path, 1) as log:
        assert log.stats.truncated_segments == 1
        assert await log.end_offsets([0]) == {0: 2}
