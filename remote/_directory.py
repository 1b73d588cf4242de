"""Objects as files under a root directory: listing, opening and deleting by name.

Invariant: a name is a clean relative path (no '..', '.', '//', NUL) that resolves
under the root; a file removed while listing is skipped, not an error.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from remote.errors import InvalidRemotePathError, RemoteResourceNotFoundError, RemoteStorageError
from remote.naming import check_object_name
from remote.storage import RemoteObject
from remote.streams import resolve_range

log = logging.getLogger(__name__)


def path_of_name(root: Path, name: str) -> Path:
    path = root / check_object_name(name)
    if not path.resolve().is_relative_to(root):
        raise InvalidRemotePathError(f"{path} escapes the remote storage root {root}")
    return path


def list_files(root: Path, top: Path) -> list[RemoteObject]:
    """Every file under ``top`` (inside ``root``), named relative to ``root``, by name."""
    found: list[RemoteObject] = []
    for directory, _, files in os.walk(top):
        for file in files:
            path = Path(directory, file)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            except OSError as e:
                raise RemoteStorageError(f"cannot stat {path}: {e}") from e
            name = path.relative_to(root).as_posix()
            found.append(RemoteObject(name, st.st_size, st.st_mtime_ns // 1_000_000))
    found.sort(key=lambda o: o.name)
    return found


def open_file(root: Path, name: str) -> BinaryIO:
    path = path_of_name(root, name)
    try:
        return open(path, "rb")
    except FileNotFoundError as e:
        raise RemoteResourceNotFoundError(f"object {name} not found: {path}") from e
    except OSError as e:
        raise RemoteStorageError(f"cannot open {path}: {e}") from e


@dataclass(frozen=True, slots=True)
class OpenRange:
    """A file opened and positioned at the start of an inclusive byte range."""

    file: BinaryIO
    size: int  # of the whole file
    start: int
    length: int  # of the range, clamped to the file


def open_range(path: Path, what: str, start_position: int, end_position: int | None) -> OpenRange:
    """``path`` opened at ``start_position`` (the range clamped to the file's size);
    RemoteResourceNotFoundError naming ``what`` when it is absent. The caller closes it."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - handed to the caller, closed there
    except FileNotFoundError as e:
        raise RemoteResourceNotFoundError(f"{what} not found: {path}") from e
    except OSError as e:
        raise RemoteStorageError(f"cannot open {path}: {e}") from e
    try:
        size = os.fstat(f.fileno()).st_size
        start, length = resolve_range(str(path), size, start_position, end_position)
        f.seek(start)
    except BaseException:
        f.close()
        raise
    return OpenRange(f, size, start, length)


def unlink_paths(paths: Iterable[Path]) -> None:
    """Delete each file; one already gone is fine (deletes are idempotent)."""
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise RemoteStorageError(f"cannot delete {path}: {e}") from e


def remove_empty_dirs(root: Path, directory: Path) -> None:
    """Remove ``directory`` and its parents while empty; stops at the first non-empty
    one, never removes ``root``."""
    while directory != root and directory.is_relative_to(root):
        try:
            directory.rmdir()
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                log.warning("cannot remove empty directory %s: %s", directory, e)
            if e.errno != errno.ENOENT:
                return
        directory = directory.parent


def unlink_files(root: Path, names: Iterable[str], *, remove_empty: bool) -> None:
    """Delete each named file (one already gone is fine); optionally drop emptied dirs."""
    paths = [path_of_name(root, name) for name in names]
    unlink_paths(paths)
    if remove_empty:
        for directory in sorted({p.parent for p in paths}, reverse=True):
            remove_empty_dirs(root, directory)


def read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise RemoteResourceNotFoundError(f"{what} not found: {path}") from e
    except OSError as e:
        raise RemoteStorageError(f"cannot read {path}: {e}") from e


__all__ = [
    "OpenRange",
    "list_files",
    "open_file",
    "open_range",
    "path_of_name",
    "read_file",
    "remove_empty_dirs",
    "unlink_files",
    "unlink_paths",
]
