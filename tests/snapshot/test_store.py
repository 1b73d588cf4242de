"""LocalSnapshotStore (built by the SnapshotStore name): atomic writes, pruning, fallback."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import crc32c
import pytest

from snapshot import (
    MAGIC,
    Snapshot,
    SnapshotConfigError,
    SnapshotEncodeError,
    SnapshotStore,
    SnapshotStoreError,
    encode_snapshot,
)


def snap(i: int, partitions: int = 3) -> Snapshot:
    return Snapshot(
        partition_count=partitions,
        applied_offsets={0: i, partitions - 1: 2 * i},
        state={"i": i, "segments": [[i, k, b"seg"] for k in range(5)]},
        created_ms=1_700_000_000_000 + i,
    )


def loaded_i(store: SnapshotStore) -> int | None:
    loaded = store.load_latest()
    return None if loaded is None else int(loaded.state["i"])


def final_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".rlmm"))


def temp_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def newer_version_file(path: Path) -> None:
    head = MAGIC + struct.pack(">HQ", 3, 3) + b"v3!"
    path.write_bytes(head + struct.pack(">I", crc32c.crc32c(head)))


# ------------------------------------------------------------------ basics


def test_write_then_load(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "snaps")
    assert store.load_latest() is None
    path = store.write(snap(1))
    assert path.name == "snapshot-00000000000000000001.rlmm"
    assert path.parent == tmp_path / "snaps"
    assert store.load_latest() == snap(1)
    assert store.stats.written == 1 and store.stats.loaded == 1
    assert temp_names(tmp_path / "snaps") == []


def test_sequence_grows_and_paths_are_newest_first(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=5)
    written = [store.write(snap(i)) for i in range(4)]
    assert store.paths() == written[::-1]
    assert sorted(p.name for p in written) == [p.name for p in written]
    # A new store continues after the highest existing sequence.
    again = SnapshotStore(tmp_path, keep=5)
    assert again.write(snap(9)).name == "snapshot-00000000000000000005.rlmm"
    assert loaded_i(again) == 9


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_prunes_to_keep(tmp_path: Path, keep: int) -> None:
    store = SnapshotStore(tmp_path, keep=keep)
    for i in range(6):
        store.write(snap(i))
        assert len(store.paths()) == min(i + 1, keep)
    assert [int(p.name[9:29]) for p in store.paths()] == list(range(6, 6 - keep, -1))
    assert store.stats.pruned == 6 - keep
    assert loaded_i(store) == 5


def test_other_files_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("mine")
    (tmp_path / "snapshot-00000000000000000099.rlmm.bak").write_text("mine")
    (tmp_path / "snapshot-00000000000000000050.rlmm").mkdir()  # not a file: ignored
    store = SnapshotStore(tmp_path, keep=1)
    for i in range(3):
        store.write(snap(i))
    assert (tmp_path / "README").exists()
    assert (tmp_path / "snapshot-00000000000000000099.rlmm.bak").exists()
    assert loaded_i(store) == 2


def test_unencodable_state_writes_nothing(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write(snap(1))
    with pytest.raises(SnapshotEncodeError):
        store.write(Snapshot(1, {}, {"bad": {1, 2}}, 0))
    assert len(store.paths()) == 1 and temp_names(tmp_path) == []
    assert loaded_i(store) == 1


# ------------------------------------------------------------------ configuration


@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "2"])
def test_bad_keep(tmp_path: Path, keep: Any) -> None:
    with pytest.raises(SnapshotConfigError, match="keep"):
        SnapshotStore(tmp_path, keep=keep)


def test_directory_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "snaps"
    target.write_text("oops")
    with pytest.raises(SnapshotStoreError, match="not a directory") as info:
        SnapshotStore(target)
    assert info.value.path == str(target)
    with pytest.raises(SnapshotStoreError, match="not a directory"):
        SnapshotStore(target, read_only=True)


def test_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("oops")
    with pytest.raises(SnapshotStoreError, match="cannot create snapshot directory"):
        SnapshotStore(tmp_path / "file" / "snaps")


def test_directory_replaced_by_a_file_after_open(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "snaps")
    (tmp_path / "snaps").rmdir()
    assert store.load_latest() is None  # gone: nothing to load, full replay
    (tmp_path / "snaps").write_text("oops")
    with pytest.raises(SnapshotStoreError, match="snaps"):
        store.load_latest()


def test_read_only_store(tmp_path: Path) -> None:
    assert SnapshotStore(tmp_path / "missing", read_only=True).load_latest() is None
    assert not (tmp_path / "missing").exists()
    SnapshotStore(tmp_path).write(snap(3))
    leftover = tmp_path / f".snapshot-00000000000000000009.{dead_pid()}.tmp"
    leftover.write_bytes(b"partial")
    reader = SnapshotStore(tmp_path, read_only=True)
    assert loaded_i(reader) == 3
    assert leftover.exists()  # a reader never deletes anything
    with pytest.raises(SnapshotStoreError, match="read-only"):
        reader.write(snap(4))


# ------------------------------------------------------------------ bad files


def test_corrupt_newest_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    for i in range(3):
        store.write(snap(i))
    newest = store.paths()[0]
    flip_byte(newest, 40)
    with caplog.at_level(logging.WARNING, logger="snapshot.local"):
        assert loaded_i(store) == 1
    assert store.stats.skipped_corrupt == 1
    assert any(newest.name in r.getMessage() and "CRC" in r.getMessage() for r in caplog.records)


def test_truncated_newest_falls_back(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write(snap(1))
    newest = store.write(snap(2))
    newest.write_bytes(newest.read_bytes()[:20])
    assert loaded_i(store) == 1
    newest.write_bytes(b"")
    assert loaded_i(store) == 1
    assert store.stats.skipped_corrupt == 2


def test_all_corrupt_gives_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    for i in range(3):
        store.write(snap(i))
    for path in store.paths():
        flip_byte(path, 0)
    with caplog.at_level(logging.WARNING, logger="snapshot.local"):
        assert store.load_latest() is None
    assert store.stats.skipped_corrupt == 3
    assert sum("bad magic" in r.getMessage() for r in caplog.records) == 3


def test_newer_version_skipped_with_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    store.write(snap(1))
    newer = tmp_path / "snapshot-00000000000000000002.rlmm"
    newer_version_file(newer)
    with caplog.at_level(logging.WARNING, logger="snapshot.local"):
        assert loaded_i(store) == 1
    assert store.stats.skipped_newer_version == 1 and store.stats.skipped_corrupt == 0
    (record,) = [r for r in caplog.records if newer.name in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "newer rlmm" in record.getMessage() and "version 3" in record.getMessage()


def test_directory_under_newest_name_is_ignored(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write(snap(1))
    newest = store.write(snap(2))
    newest.unlink()
    newest.mkdir()  # a directory under a snapshot's name is not listed at all
    assert loaded_i(store) == 1


def test_write_after_corrupt_newest_supersedes_and_prunes_it(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=2)
    store.write(snap(1))
    bad = store.write(snap(2))
    flip_byte(bad, 30)
    assert loaded_i(store) == 1
    store.write(snap(3))
    # keep=2 valid ones: 3 and 1; the corrupt 2 in between is deleted.
    assert not bad.exists()
    assert final_names(tmp_path) == [
        "snapshot-00000000000000000001.rlmm",
        "snapshot-00000000000000000003.rlmm",
    ]
    assert loaded_i(store) == 3


def test_open_prunes_surplus_left_by_a_crash(tmp_path: Path) -> None:
    for seq in range(1, 6):
        (tmp_path / f"snapshot-{seq:020d}.rlmm").write_bytes(encode_snapshot(snap(seq)))
    store = SnapshotStore(tmp_path, keep=2)
    assert final_names(tmp_path) == [
        "snapshot-00000000000000000004.rlmm",
        "snapshot-00000000000000000005.rlmm",
    ]
    assert store.stats.pruned == 3
    assert loaded_i(store) == 5


# ------------------------------------------------------------------ temp files


def test_leftover_temps_removed_on_open_and_write(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write(snap(1))
    pid = dead_pid()
    first = tmp_path / f".snapshot-00000000000000000002.{pid}.tmp"
    first.write_bytes(b"torn")
    own = tmp_path / f".snapshot-00000000000000000002.{os.getpid()}.tmp"
    own.write_bytes(b"torn by an earlier life of this pid")
    live = tmp_path / f".snapshot-00000000000000000002.{os.getppid()}.tmp"
    live.write_bytes(b"someone is writing this right now")
    reopened = SnapshotStore(tmp_path)
    assert not first.exists() and not own.exists()
    assert live.exists()  # its writer is alive: not ours to delete
    assert reopened.stats.temp_removed == 2
    later = tmp_path / f".snapshot-00000000000000000003.{pid}.tmp"
    later.write_bytes(b"torn")
    reopened.write(snap(2))
    assert not later.exists()
    assert temp_names(tmp_path) == [live.name]
    assert loaded_i(reopened) == 2


def test_failed_write_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path)
    store.write(snap(1))

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(SnapshotStoreError, match="No space left") as info:
        store.write(snap(2))
    assert info.value.path is not None and info.value.path.endswith(".rlmm")
    monkeypatch.undo()
    assert temp_names(tmp_path) == []
    assert len(store.paths()) == 1 and loaded_i(store) == 1


def test_failed_rename_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path)
    store.write(snap(1))

    def failing_replace(src: Any, dst: Any) -> None:
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(SnapshotStoreError, match="Permission denied"):
        store.write(snap(2))
    monkeypatch.undo()
    assert temp_names(tmp_path) == [] and len(store.paths()) == 1
    # The failed sequence number is not reused by the next write's file: it is never
    # visible, so max existing + 1 is still correct.
    assert store.write(snap(3)).name == "snapshot-00000000000000000002.rlmm"


# ------------------------------------------------------------------ async


async def test_write_async(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    path = await store.write_async(snap(1))
    assert path.exists()
    assert (await store.load_latest_async()) == snap(1)


async def test_concurrent_async_writes_get_distinct_sequences(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    paths = await asyncio.gather(*(store.write_async(snap(i)) for i in range(8)))
    assert len({p.name for p in paths}) == 8
    assert len(store.paths()) == 3
    assert store.stats.written == 8 and store.stats.pruned == 5
    assert temp_names(tmp_path) == []
    assert store.load_latest() is not None
