"""remote._file_copy: the kernel's copy and a mapped checksum, and the hand copy that
takes over where the kernel refuses."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from remote._file_copy import copy_file
from remote.errors import InvalidSegmentDataError
from remote.manifest import crc32c_of
from remote.segment_data import smallest_timestamp
from remote.segments.writer import PartitionDirWriter, generate_records
from remote.storage import LogSegmentData


def _copy(source: Path, dest: Path) -> tuple[int, int]:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        return copy_file(source, fd, dest)
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", [0, 1, 4096, (3 << 20) + 17])
def test_a_copy_holds_the_source_bytes_and_their_crc(tmp_path: Path, size: int) -> None:
    data = random.Random(size).randbytes(size)
    source = tmp_path / "00000000000000000000.log"
    source.write_bytes(data)
    assert _copy(source, tmp_path / "copy") == (size, crc32c_of(data))
    assert (tmp_path / "copy").read_bytes() == data


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP])
def test_where_the_kernel_refuses_the_copy_goes_on_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    data = random.Random(1).randbytes((2 << 20) + 5)
    source = tmp_path / "s.log"
    source.write_bytes(data)
    real = os.copy_file_range
    calls = []

    def once_then_refuse(src: int, dst: int, count: int, a: int, b: int) -> int:
        calls.append(a)
        if len(calls) == 1:  # the kernel copies a first part, then refuses the rest
            return real(src, dst, min(count, 1000), a, b)
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(os, "copy_file_range", once_then_refuse)
    assert _copy(source, tmp_path / "copy") == (len(data), crc32c_of(data))
    assert (tmp_path / "copy").read_bytes() == data
    assert calls == [0, 1000]


def test_a_source_that_ends_early_fails_the_copy_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "s.log"
    source.write_bytes(b"x" * 10_000)
    monkeypatch.setattr(os, "copy_file_range", lambda *a: 0)
    with pytest.raises(InvalidSegmentDataError, match=r"s\.log shrank while copied: 0 of 10000"):
        _copy(source, tmp_path / "copy")


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidSegmentDataError, match=r"cannot read segment file .*gone\.log"):
        _copy(tmp_path / "gone.log", tmp_path / "copy")


def _segment_data(log: Path) -> LogSegmentData:
    return LogSegmentData(log, log, log, None, log, b"")


def test_the_smallest_timestamp_is_read_in_place(tmp_path: Path) -> None:
    with PartitionDirWriter(tmp_path, "t", 0) as w:
        records = generate_records(20, base_timestamp=5_000)
        w.append_batch(list(reversed(records)))
    log = next((tmp_path / "t-0").glob("*.log"))
    assert smallest_timestamp(_segment_data(log)) == 5_000


def test_a_segment_that_does_not_parse_has_no_smallest_timestamp(tmp_path: Path) -> None:
    """The scan fails inside the mapping: the copy still goes on (None: unknown), and
    the views the error holds do not turn it into another error."""
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"\x00" * 8 + b"\x00\x00\x00\x40" + b"\xff" * 200)
    assert smallest_timestamp(_segment_data(log)) is None
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert smallest_timestamp(_segment_data(empty)) is None
