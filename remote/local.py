"""LocalRemoteStorageManager: remote storage in a local directory (the embedded default).

Invariants: an object appears under its final name only complete and fsynced (written
to a temp file, fsynced, then hard-linked into place, which also refuses to replace an
existing object: write-once); every path is built by ``remote.naming.object_name``
and checked to stay under the root; a failed copy removes what it created.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from remote._directory import (
    list_files,
    open_file,
    open_range,
    read_file,
    remove_empty_dirs,
    unlink_files,
    unlink_paths,
)
from remote._file_copy import copy_file
from remote.errors import (
    InvalidRemotePathError,
    RemoteIntegrityError,
    RemoteObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from remote.manifest import ObjectChecksum, SegmentManifest, crc32c_of, verify_object
from remote.naming import OBJECT_KINDS, ObjectKind, kind_label, object_name, partition_prefix
from remote.segment_data import smallest_timestamp
from remote.storage import IndexType, LogSegmentData, RemoteObject, RemoteStorageManager
from remote.streams import verifying_stream
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Written:
    checksum: ObjectChecksum
    created: bool


class LocalRemoteStorageManager(RemoteStorageManager):
    """Stores segment copies as files under ``root`` (same layout as the S3 backend)."""

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self._root = Path(root).resolve()
        self._fsync = fsync
        self._closed = False
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RemoteStorageError(f"cannot create remote storage root {self._root}: {e}") from e

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"LocalRemoteStorageManager(root={str(self._root)!r})"

    # --- paths -----------------------------------------------------------------------

    def path_of(self, metadata: RemoteLogSegmentMetadata, kind: ObjectKind) -> Path:
        """Where one object of the segment copy lives (checked to be under the root)."""
        path = self._root / object_name(metadata, kind)
        # object_name already rejects illegal topics; this guards the layout itself.
        if not path.resolve().is_relative_to(self._root):
            raise InvalidRemotePathError(f"{path} escapes the remote storage root {self._root}")
        return path

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"{self!r} is closed")

    # --- copy --------------------------------------------------------------------------

    def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment_data: LogSegmentData,
        *,
        cancelled: threading.Event | None = None,
    ) -> bytes | None:
        self._check_open()
        targets = [(kind, self.path_of(metadata, kind)) for kind in OBJECT_KINDS]
        created: list[Path] = []
        objects: dict[ObjectKind, ObjectChecksum] = {}
        try:
            for kind, path in targets:
                source = segment_data.source(kind)
                if source is None:
                    continue
                if cancelled is not None and cancelled.is_set():
                    raise RemoteStorageError(
                        f"copy of {metadata.remote_log_segment_id} cancelled before {path}"
                    )
                written = self._write_once(path, source)
                if written.created:
                    created.append(path)
                objects[kind] = written.checksum
        except BaseException:
            for path in created:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._remove_empty_dirs(targets[0][1].parent)
            raise
        log.debug("copied %s to %s", metadata.remote_log_segment_id, targets[0][1])
        return SegmentManifest(objects, smallest_timestamp(segment_data)).encode()

    def _write_once(self, dest: Path, source: Path | bytes) -> _Written:
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
        for attempt in range(3):
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileNotFoundError as e:
                # A concurrent delete removed the (then empty) directory; make it again.
                if attempt == 2:
                    raise RemoteStorageError(f"cannot create {tmp}: {e}") from e
            except OSError as e:
                raise RemoteStorageError(f"cannot create {tmp}: {e}") from e
        try:
            try:
                size, crc = self._fill(fd, tmp, source)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, dest)
                created = True
            except FileExistsError:
                created = False
            except OSError as e:
                raise RemoteStorageError(f"cannot publish {dest}: {e}") from e
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        checksum = ObjectChecksum(size, crc)
        if not created:
            existing = self._checksum_of(dest)
            if existing != checksum:
                raise RemoteObjectExistsError(
                    f"{dest} already exists with different content "
                    f"({existing.size} bytes, crc32c {existing.crc32c:08x}; "
                    f"this copy: {size} bytes, crc32c {crc:08x})"
                )
            log.debug("%s already exists with identical content: write-once retry ok", dest)
        elif self._fsync:
            self._fsync_dir(dest.parent)
        return _Written(checksum, created)

    @staticmethod
    def _fill(fd: int, tmp: Path, source: Path | bytes) -> tuple[int, int]:
        if isinstance(source, bytes):
            _write_all(fd, tmp, source)
            return len(source), crc32c_of(source)
        return copy_file(source, fd, tmp)

    @staticmethod
    def _checksum_of(path: Path) -> ObjectChecksum:
        size = crc = 0
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                crc = crc32c_of(chunk, crc)
                size += len(chunk)
        return ObjectChecksum(size, crc)

    def _fsync_dir(self, directory: Path) -> None:
        # Make the new directory entry durable (the rename/link itself lives in the dir).
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- fetch -------------------------------------------------------------------------

    def _open_log_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        self._check_open()
        path = self.path_of(metadata, None)
        opened = open_range(
            path, f"log segment of {metadata.remote_log_segment_id}", start_position, end_position
        )
        f, size = opened.file, opened.size
        expected = None
        manifest = SegmentManifest.of(metadata)
        whole = opened.start == 0 and opened.length == size
        if whole and manifest is not None and None in manifest.objects:
            expected = manifest.objects[None].crc32c
            if manifest.objects[None].size != size:
                f.close()
                raise RemoteIntegrityError(
                    f"{path}: size {size} does not match {manifest.objects[None].size} "
                    "recorded in the manifest"
                )
        return verifying_stream(
            str(path), f.read, f.close, opened.length, expected, self._translate
        )

    @staticmethod
    def _translate(e: Exception) -> Exception:
        return RemoteStorageError(f"reading remote segment failed: {e}")

    def log_segment_file(self, metadata: RemoteLogSegmentMetadata) -> Path:
        """The log object itself: this store keeps each object as a plain file."""
        self._check_open()
        path = self.path_of(metadata, None)
        if not path.is_file():
            raise RemoteResourceNotFoundError(
                f"log segment of {metadata.remote_log_segment_id} not found: {path}"
            )
        return path

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self._check_open()
        kind = IndexType(index_type)
        path = self.path_of(metadata, kind)
        data = read_file(path, f"{kind_label(kind)} of segment {metadata.remote_log_segment_id}")
        manifest = SegmentManifest.of(metadata)
        if manifest is not None:
            verify_object(str(path), data, manifest.objects.get(kind))
        return data

    # --- delete ------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._check_open()
        paths = [self.path_of(metadata, kind) for kind in OBJECT_KINDS]
        unlink_paths(paths)
        directory = paths[0].parent
        # Temp files of copies that crashed before publishing belong to this segment too.
        stem = paths[0].name.removesuffix(".log")
        with contextlib.suppress(FileNotFoundError):
            for stray in directory.glob(f".{stem}.*.tmp"):
                with contextlib.suppress(FileNotFoundError):
                    stray.unlink()
        self._remove_empty_dirs(directory)

    def _remove_empty_dirs(self, directory: Path) -> None:
        # Partition dir, then topic dir; stops at the first non-empty one, never the root.
        remove_empty_dirs(self._root, directory)

    # --- inventory ----------------------------------------------------------------------

    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        self._check_open()
        top = self._root
        if topic_id_partition is not None:
            top = self._root / partition_prefix(topic_id_partition)
        # os.walk ignores errors by default; a directory removed meanwhile is simply gone.
        return iter(list_files(self._root, top))

    def open_object(self, name: str) -> BinaryIO:
        self._check_open()
        return open_file(self._root, name)

    def delete_objects(self, names: Iterable[str]) -> None:
        self._check_open()
        unlink_files(self._root, names, remove_empty=True)

    def close(self) -> None:
        self._closed = True


def _write_all(fd: int, tmp: Path, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise RemoteStorageError(f"cannot write {tmp}: {e}") from e


__all__ = ["LocalRemoteStorageManager"]
