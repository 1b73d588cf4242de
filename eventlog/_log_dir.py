"""A file event log's directory files: the writer's lock, the format file, the clean mark.

Layout: ``<dir>/LOCK`` (flock'ed by the one writer process, which writes its pid in
it), ``<dir>/eventlog.json`` (format version and partition count) and
``<dir>/.clean-shutdown`` (Kafka's ``.kafka_cleanshutdown``: every append of the last
writer is on disk and nothing followed).

Invariants: one writer at a time (a second is refused, naming the holder's pid); a
directory's partition count is never guessed (partition dirs without
``eventlog.json`` are refused) and ``eventlog.json`` is written whole or not at all
(temp file, fsync, rename, fsync of the dir); the clean mark is removed, durably,
before a writer's first append, so a crash after any open is recovered in full.
``stored_start_offsets`` reads each partition's log start from the listing alone,
without opening the log (or taking its lock).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from eventlog._partition import partition_dir
from eventlog._retention import first_base
from eventlog._segment import fsync_dir
from eventlog.errors import EventLogConfigError, EventLogLockedError

META_FILE = "eventlog.json"
LOCK_FILE = "LOCK"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"  # Kafka: .kafka_cleanshutdown
FORMAT_VERSION = 1


def lock_writer(dir: Path) -> int:
    """Take the directory's writer lock: the locked file's descriptor (closing it
    drops the lock); EventLogLockedError while another process holds it."""
    path = dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise EventLogLockedError(
            f"event log dir {dir} is locked by another writer (pid {holder}, {path}):"
            " one process writes it at a time; readers open it read-only beside it",
            dir=str(dir),
            holder=holder,
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def check_meta(dir: Path, partitions: int) -> None:
    """The directory's partition count is ``partitions``; a new directory is given
    its ``eventlog.json``."""
    meta = dir / META_FILE
    if meta.is_file():
        try:
            stored = json.loads(meta.read_text())
            count = int(stored["partitions"])
        except (ValueError, KeyError, TypeError) as e:
            raise EventLogConfigError(f"{meta} is not a valid event log meta file") from e
        if count != partitions:
            raise EventLogConfigError(
                f"event log in {dir} has {count} partitions, configured with {partitions}"
            )
        return
    extra = sorted(p.name for p in dir.glob("__remote_log_metadata-*"))
    if extra:
        raise EventLogConfigError(
            f"{dir} holds partition dirs {extra} but no {META_FILE}; "
            f"refusing to guess its partition count"
        )
    tmp = meta.with_suffix(".tmp")
    body = {"format_version": FORMAT_VERSION, "partitions": partitions}
    with open(tmp, "w") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, meta)
    fsync_dir(dir)


def take_clean_mark(dir: Path) -> bool:
    """Whether the last writer closed cleanly; its mark is removed (durably) either way."""
    marker = dir / CLEAN_SHUTDOWN_FILE
    if not marker.exists():
        return False
    marker.unlink()
    fsync_dir(dir)
    return True


def mark_clean_shutdown(dir: Path) -> None:
    """Every append is on disk (fsynced) and nothing follows: say so for the next open."""
    path = dir / CLEAN_SHUTDOWN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(dir)


def stored_start_offsets(dir: str | os.PathLike[str], partitions: int) -> dict[int, int]:
    """Log start offset of each partition of the file log in ``dir``, read from its
    directory listing without opening the log (0 for a partition not created yet)."""
    root = Path(dir)
    starts = {}
    for p in range(partitions):
        first = first_base(partition_dir(root, p))
        starts[p] = 0 if first is None else first
    return starts


__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "FORMAT_VERSION",
    "LOCK_FILE",
    "META_FILE",
    "check_meta",
    "lock_writer",
    "mark_clean_shutdown",
    "stored_start_offsets",
    "take_clean_mark",
]
