"""A segment file's bytes into a store's file, and their CRC-32C, without passing the
bytes through Python.

A tiering copy's CPU was Python reading each file in chunks, checksumming and writing
them, then reading the log once more for its smallest timestamp. Here the source is
mapped (the checksum and the timestamp scan read the page cache in place) and the
kernel copies the bytes (``copy_file_range``; where the kernel or the filesystems
refuse it, positioned reads and writes take over from where it stopped).

Invariants: exactly the ``size`` bytes the source had when opened are copied and
checksummed, or the copy fails naming the file (a source that shrinks under the copy
is an InvalidSegmentDataError, never a short object). A mapping is read only while
Kafka cannot truncate the file: the segments handed over are rolled and below the
high watermark, which only an unclean leader election truncates; a truncation under a
mapping read would end the process (SIGBUS), which the plugin's supervisor restarts
like any crash, and the copy is retried.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from remote.errors import InvalidSegmentDataError, RemoteStorageError
from remote.manifest import crc32c_of

_CHUNK = 1 << 20
# copy_file_range's refusals that mean "not between these files": copy by hand instead
_NO_KERNEL_COPY = {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF}


@contextlib.contextmanager
def mapped(fd: int, size: int) -> Iterator[memoryview]:
    """A read-only view of the first ``size`` bytes of ``fd`` (empty for 0)."""
    if size == 0:
        yield memoryview(b"")
        return
    mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    try:
        yield view
    finally:
        # Views of it that a failed scan's traceback still holds keep it mapped until
        # they go (BufferError); the mapping is only memory, never a lost error.
        with contextlib.suppress(BufferError):
            view.release()
            mm.close()


def copy_file(source: Path, dest_fd: int, dest: Path) -> tuple[int, int]:
    """Copy ``source`` into ``dest_fd`` (a new, empty file at ``dest``); its size and
    CRC-32C."""
    try:
        src = os.open(source, os.O_RDONLY)
    except OSError as e:
        raise InvalidSegmentDataError(f"cannot read segment file {source}: {e}") from e
    try:
        size = os.fstat(src).st_size
        try:
            with mapped(src, size) as view:
                crc = crc32c_of(view)
        except (OSError, ValueError) as e:
            raise InvalidSegmentDataError(f"cannot read segment file {source}: {e}") from e
        _copy_range(src, dest_fd, size, source, dest)
    finally:
        os.close(src)
    return size, crc


def _copy_range(src: int, dst: int, size: int, source: Path, dest: Path) -> None:
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while done < size:
        if kernel:
            try:
                n = os.copy_file_range(src, dst, size - done, done, done)
            except OSError as e:
                if e.errno not in _NO_KERNEL_COPY:
                    raise RemoteStorageError(f"cannot copy {source} to {dest}: {e}") from e
                kernel = False
                continue
        else:
            n = _copy_chunk(src, dst, min(_CHUNK, size - done), done, source, dest)
        if n == 0:
            raise InvalidSegmentDataError(
                f"segment file {source} shrank while copied: {done} of {size} bytes read"
            )
        done += n


def _copy_chunk(src: int, dst: int, length: int, at: int, source: Path, dest: Path) -> int:
    try:
        data = os.pread(src, length, at)
    except OSError as e:
        raise InvalidSegmentDataError(f"cannot read segment file {source}: {e}") from e
    view = memoryview(data)
    try:
        while view:
            view = view[os.pwrite(dst, view, at + len(data) - len(view)) :]
    except OSError as e:
        raise RemoteStorageError(f"cannot write {dest}: {e}") from e
    return len(data)


__all__ = ["copy_file", "mapped"]
