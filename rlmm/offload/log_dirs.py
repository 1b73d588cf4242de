"""Log dirs: a broker's ``log.dirs`` entries themselves, beside their partition dirs.

Invariants: read-only; a checkpoint file Kafka has not filled yet (it creates them
empty at start) reads as no entry, one that does not parse raises LogDirError naming
the file; a directory that looks like a partition dir, or that holds none, is said to
be the wrong one (the sidecar would report success over nothing).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from remote import SegmentFormatError
from remote.segments import parse_partition_dir_name
from rlmm.offload.errors import LogDirError

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's per-log-dir offset checkpoint: ``0``, a count, then ``topic partition offset``."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise LogDirError(f"{path}: cannot read: {e}") from e
    if not lines:
        # Kafka creates its checkpoint files empty at start and fills them on the
        # first checkpoint (the log start one only after a minute).
        return {}
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split()
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            raise ValueError(f"{count} entries announced, {len(out)} found")
        return out
    except (IndexError, ValueError) as e:
        raise LogDirError(f"{path}: not a Kafka offset checkpoint: {e}") from e


def log_dir_problem(log_dir: Path) -> str | None:
    """Why ``log_dir`` does not look like one of Kafka's ``log.dirs`` entries, or None.

    One that looks like a partition dir itself (``orders-0``, holding ``.log`` files),
    or that holds no partition dir (``<topic>-<partition>/``) at all, is most likely the
    wrong directory: the sidecar would report success over nothing.
    """
    try:
        entries = list(os.scandir(log_dir))
    except OSError as e:
        return f"log dir {log_dir} cannot be read: {e}"
    if any(e.name.endswith(".log") and e.is_file() for e in entries) or any(
        e.name == "partition.metadata" for e in entries
    ):
        return (
            f"log dir {log_dir} looks like a partition dir itself: --log-dir takes the"
            f" broker's log.dirs entry ({log_dir.parent}?), which holds <topic>-<partition>/ dirs"
        )
    for entry in entries:
        if entry.is_dir():
            with contextlib.suppress(SegmentFormatError):
                parse_partition_dir_name(entry.name)
                return None
    return (
        f"log dir {log_dir} holds no partition dir (<topic>-<partition>/): is it the"
        " broker's log.dirs entry?"
    )


__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "log_dir_problem",
    "read_offset_checkpoint",
]
