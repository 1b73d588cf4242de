"""LocalRemoteStorageManager specifics: atomic write-once files, cleanup, path checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from remote import IndexType, InvalidRemotePathError, InvalidSegmentDataError
from remote.local import LocalRemoteStorageManager
from remote.storage import LogSegmentData
from tests.remote.conftest import make_metadata, write_segment


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_copy_leaves_no_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    with LocalRemoteStorageManager(root) as rsm:
        rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l").data)
    names = [p.name for p in root.rglob("*") if p.is_file()]
    assert len(names) == 6
    assert not [n for n in names if n.endswith(".tmp")]


def test_delete_removes_crash_leftovers_and_empty_dirs(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    rsm = LocalRemoteStorageManager(root, fsync=False)
    metadata = make_metadata()
    rsm.copy_log_segment_data(metadata, write_segment(tmp_path / "l").data)
    log_path = rsm.path_of(metadata, None)
    # A copy that crashed after writing its temp file, before publishing it.
    stray = log_path.with_name(f".{log_path.name.removesuffix('.log')}.index.abc.tmp")
    stray.write_bytes(b"partial")
    rsm.delete_log_segment_data(metadata)
    assert files_under(root) == []
    assert root.is_dir()
    rsm.close()


def test_delete_keeps_directories_in_use(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    rsm = LocalRemoteStorageManager(root)
    a, b = make_metadata(start_offset=0), make_metadata(start_offset=100)
    rsm.copy_log_segment_data(a, write_segment(tmp_path / "a", seed=1).data)
    rsm.copy_log_segment_data(b, write_segment(tmp_path / "b", seed=2).data)
    rsm.delete_log_segment_data(a)
    assert rsm.fetch_index(b, IndexType.OFFSET)
    assert len([p for p in root.rglob("*") if p.is_file()]) == 6


def test_missing_source_file_fails_cleanly(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    rsm = LocalRemoteStorageManager(root)
    seg = write_segment(tmp_path / "l")
    missing = tmp_path / "l" / "gone.snapshot"
    data = LogSegmentData(
        seg.data.log_segment,
        seg.data.offset_index,
        seg.data.time_index,
        seg.data.transaction_index,
        missing,
        seg.data.leader_epoch_index,
    )
    with pytest.raises(InvalidSegmentDataError, match=r"gone\.snapshot"):
        rsm.copy_log_segment_data(make_metadata(), data)
    assert files_under(root) == []  # objects written before the failure are gone too


def test_symlinked_directory_cannot_escape_root(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    rsm = LocalRemoteStorageManager(root)
    metadata = make_metadata()
    outside = tmp_path / "outside"
    outside.mkdir()
    topic_dir = rsm.path_of(metadata, None).parent.parent
    topic_dir.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, topic_dir)
    with pytest.raises(InvalidRemotePathError, match="escapes"):
        rsm.copy_log_segment_data(metadata, write_segment(tmp_path / "l").data)
    assert list(outside.iterdir()) == []


def test_identical_retry_after_partial_copy(tmp_path: Path) -> None:
    # A copy that died after publishing some objects is completed by a retry.
    root = tmp_path / "remote"
    rsm = LocalRemoteStorageManager(root)
    metadata = make_metadata()
    seg = write_segment(tmp_path / "l")
    log_path = rsm.path_of(metadata, None)
    log_path.parent.mkdir(parents=True)
    log_path.write_bytes(seg.contents["log_segment"])
    rsm.copy_log_segment_data(metadata, seg.data)
    assert len([p for p in root.rglob("*") if p.is_file()]) == 6
