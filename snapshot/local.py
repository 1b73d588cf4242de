"""LocalSnapshotStore: atomic, pruned snapshot files in one directory.

Files are ``snapshot-<seq:020>.rlmm``: the name sorts by a sequence number that only
grows (max existing + 1), so the newest is the last name. A write goes to a temp
file ``.snapshot-<seq:020>.<pid>.tmp`` in the same directory, is fsynced, renamed to
its final name (atomic on POSIX) and the directory is fsynced; only then are older
files pruned down to the newest ``keep`` valid ones.

Invariant: at every instant, and after a crash at any instant, each final-named
file is either a complete snapshot or one that existed before (never a torn one),
and the newest complete snapshot is never deleted by pruning. ``load_latest``
never raises for a bad file: corrupt, unreadable and newer-version files are
logged, counted in ``stats`` and skipped, so the caller falls back to an older
snapshot or to a full replay. One writing process per directory (a read-only
store may look at the same directory at any time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from snapshot.errors import (
    SnapshotConfigError,
    SnapshotError,
    SnapshotStoreError,
)
from snapshot.format import Snapshot, encode_snapshot_parts, verify_snapshot
from snapshot.store import SnapshotStore, SnapshotStoreStats

log = logging.getLogger(__name__)

_FINAL_RE = re.compile(r"^snapshot-(\d{20})\.rlmm$")
_TEMP_RE = re.compile(r"^\.snapshot-(\d{20})\.(\d+)\.tmp$")

# os.write on Linux moves at most ~2 GiB per call; larger bodies need a loop anyway.
_WRITE_CHUNK = 1 << 30


def _final_name(seq: int) -> str:
    return f"snapshot-{seq:020d}.rlmm"


def _pid_alive(pid: int) -> bool:
    # pid 0 or negative would signal a whole process group: never a live writer.
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OSError:
        return False
    return True


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable: without it a power loss can forget the new name.
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fully(fd: int, parts: tuple[bytes, memoryview, bytes]) -> None:
    for part in parts:
        view = memoryview(part)
        while view.nbytes:
            written = os.write(fd, view[:_WRITE_CHUNK])
            view = view[written:]


class LocalSnapshotStore(SnapshotStore):
    """Keeps the newest ``keep`` valid snapshots of one owner in ``directory``.

    Opening (unless ``read_only``) creates the directory if needed, removes temp
    files left by a crashed writer and prunes surplus files a crash left behind.
    """

    def __init__(self, directory: Path | str, keep: int = 2, *, read_only: bool = False) -> None:
        if type(keep) is not int or keep < 1:
            raise SnapshotConfigError(f"snapshot store keep must be an int >= 1, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.read_only = read_only
        self.stats = SnapshotStoreStats()
        # Serialises writers of this store (write_async runs on worker threads).
        self._lock = threading.Lock()
        self._last_seq = 0
        if self.directory.exists() and not self.directory.is_dir():
            raise SnapshotStoreError(
                f"snapshot directory {self.directory} exists but is not a directory",
                path=str(self.directory),
            )
        if read_only:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SnapshotStoreError(
                f"cannot create snapshot directory {self.directory}: {exc}",
                path=str(self.directory),
            ) from exc
        with self._lock:
            self._remove_temp_leftovers()
            self._prune(known_valid=None)

    def __repr__(self) -> str:
        return f"LocalSnapshotStore({str(self.directory)!r}, keep={self.keep})"

    # ----------------------------------------------------------------- listing

    def _list(self) -> list[tuple[int, Path]]:
        """(seq, path) of every final-named file, newest first."""
        entries: list[tuple[int, Path]] = []
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    match = _FINAL_RE.match(entry.name)
                    if match and entry.is_file():
                        entries.append((int(match.group(1)), Path(entry.path)))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SnapshotStoreError(
                f"cannot list snapshot directory {self.directory}: {exc}",
                path=str(self.directory),
            ) from exc
        entries.sort(reverse=True)
        return entries

    def paths(self) -> list[Path]:
        """Final-named snapshot files, newest first (valid or not)."""
        return [path for _, path in self._list()]

    def kept(self) -> list[str]:
        return [str(path) for _, path in self._list()]

    def read(self, location: str) -> bytes:
        path = Path(location)
        if path.parent != self.directory or not _FINAL_RE.match(path.name):
            raise SnapshotStoreError(
                f"{location} is not a snapshot of {self!r}", path=str(location)
            )
        try:
            return path.read_bytes()
        except OSError as exc:
            raise SnapshotStoreError(
                f"cannot read snapshot {location}: {exc}", path=str(location)
            ) from exc

    # ----------------------------------------------------------------- writing

    def write(self, snapshot: Snapshot) -> Path:
        """Durably store ``snapshot`` as the newest file, prune, and return its path."""
        if self.read_only:
            raise SnapshotStoreError(
                f"snapshot store {self.directory} is read-only", path=str(self.directory)
            )
        # Encode before taking the lock: pure CPU, and only the file steps need ordering.
        header, body, trailer = encode_snapshot_parts(snapshot)
        try:
            with self._lock:
                self._remove_temp_leftovers()
                newest = self._list()
                seq = max(self._last_seq, newest[0][0] if newest else 0) + 1
                final = self.directory / _final_name(seq)
                temp = self.directory / f".snapshot-{seq:020d}.{os.getpid()}.tmp"
                self._write_atomically(temp, final, (header, body, trailer))
                self._last_seq = seq
                self.stats.written += 1
                log.debug("wrote snapshot %s (%d body bytes)", final, body.nbytes)
                self._prune(known_valid=final)
        finally:
            body.release()
        return final

    def _write_atomically(
        self, temp: Path, final: Path, parts: tuple[bytes, memoryview, bytes]
    ) -> None:
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _write_fully(fd, parts)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, final)
            _fsync_directory(self.directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise SnapshotStoreError(
                f"cannot write snapshot {final}: {exc}", path=str(final)
            ) from exc

    def _remove_temp_leftovers(self) -> None:
        """Delete temp files whose writer is gone (or is a previous life of this pid)."""
        own_pid = os.getpid()
        try:
            with os.scandir(self.directory) as it:
                names = [entry.name for entry in it]
        except OSError as exc:
            raise SnapshotStoreError(
                f"cannot list snapshot directory {self.directory}: {exc}",
                path=str(self.directory),
            ) from exc
        for name in names:
            match = _TEMP_RE.match(name)
            if not match:
                continue
            pid = int(match.group(2))
            # Our own pid cannot be mid-write here (we hold the lock): the file is from an
            # earlier process that had the same pid, e.g. pid 1 in a restarted container.
            if pid != own_pid and _pid_alive(pid):
                continue
            path = self.directory / name
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot remove leftover snapshot temp file %s: %s", path, exc)
                continue
            self.stats.temp_removed += 1
            log.info("removed leftover snapshot temp file %s (writer pid %d gone)", path, pid)

    # ----------------------------------------------------------------- pruning

    def _problem(self, path: Path) -> str | None:
        """Why ``path`` is not a usable snapshot (frame + CRC + version), or None."""
        try:
            verify_snapshot(path.read_bytes(), str(path))
        except OSError as exc:
            return f"unreadable: {exc}"
        except SnapshotError as exc:
            return str(exc)
        return None

    def _prune(self, known_valid: Path | None) -> None:
        """Keep the newest ``keep`` valid files; delete every other final-named file.

        Deletions are not fsynced: a pruned file that reappears after a power loss is
        merely one more old snapshot.
        """
        entries = self._list()
        if len(entries) <= self.keep:
            return
        kept = 0
        for _, path in entries:
            if kept < self.keep:
                problem = None if path == known_valid else self._problem(path)
                if problem is None:
                    kept += 1
                    continue
                log.warning("deleting unusable snapshot %s: %s", path, problem)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot prune snapshot %s: %s", path, exc)
                continue
            self.stats.pruned += 1
            log.debug("pruned snapshot %s", path)

    # ----------------------------------------------------------------- loading

    def load_latest(self) -> Snapshot | None:
        """The newest valid snapshot, or None if there is none (the caller replays fully).

        Raises SnapshotStoreError only if the directory itself cannot be listed.
        """
        return next((snap for _, snap in self.iter_valid()), None)

    def iter_valid(self, *, all_owners: bool = False) -> Iterator[tuple[str, Snapshot]]:
        """Valid snapshots newest first (a directory has one owner: ``all_owners`` is moot)."""
        for _, path in self._list():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # pruned between listing and reading
            except OSError as exc:
                self.stats.skipped_unreadable += 1
                log.warning("skipping unreadable snapshot %s: %s", path, exc)
                continue
            snapshot = self._decode_or_skip(data, str(path), log)
            del data
            if snapshot is None:
                continue
            yield str(path), snapshot
