"""Directory listings, kept while their directory is unchanged.

Scale: a round over thousands of partitions must not cost time proportional to all
their segments. A directory's listing is reused while the directory's (inode, mtime)
is unchanged: Kafka creates, deletes and renames files (rolls, snapshots, checkpoints,
retention, compaction), each of which changes its directory's mtime. A listing is kept
only when that mtime is older than ``SETTLED_S`` at the time it was read: mtimes tick
coarsely, so a change in the same tick as a fresh mtime could leave it equal.

Invariant: a kept listing (a partition dir's segments and producer snapshots, a log
dir's partition dir names) holds only ints and strings, and is used only while its
directory's key is the one it was read at and was settled then.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, overload

from remote.segments import offset_file_name
from remote.segments.partition_dir import LOG_SUFFIX
from rlmm.offload.log_source import LocalSegment

if TYPE_CHECKING:  # the cache keeps sources, never builds one; logdir imports this module
    from rlmm.offload.logdir import LogDirSource

# A listing or change token is trusted only once its files' mtimes are this old.
SETTLED_S = 1.0


def settled(*mtimes_ns: int) -> bool:
    """True when every mtime is at least SETTLED_S in the past (see the module doc)."""
    return time.time_ns() - max(mtimes_ns) >= SETTLED_S * 1e9


class Listing:
    """A partition dir's segments and producer snapshots as one listing found them, at
    the dir's (inode, mtime_ns) ``key``; only ints and strings (see LogDirSource)."""

    __slots__ = ("active", "bases", "key", "sizes", "snapshots")

    def __init__(
        self, key: tuple[int, int], bases: tuple[int, ...], snapshots: tuple[int, ...], active: str
    ) -> None:
        self.key = key
        self.bases = bases  # the segments' base offsets, ascending; the last is active
        self.snapshots = snapshots  # the producer snapshots' offsets, ascending
        self.active = active  # the active segment's .log path
        self.sizes: tuple[int, ...] | None = None  # the rolled .log sizes, once stat'ed


NO_LISTING = Listing((0, 0), (), (), "")


def log_path(directory: str, base_offset: int) -> str:
    """The path of the ``.log`` file of the segment at ``base_offset`` in ``directory``."""
    return os.path.join(directory, offset_file_name(base_offset, LOG_SUFFIX))


class RolledSegments(Sequence[LocalSegment]):
    """A listing's rolled segments, each LocalSegment built only when it is read (see
    LogView): the listing's ints are all a round's view holds per segment."""

    __slots__ = ("_bases", "_dir", "_sizes")

    def __init__(self, bases: tuple[int, ...], sizes: tuple[int, ...], directory: str) -> None:
        self._bases = bases  # the active segment's base last
        self._sizes = sizes
        self._dir = directory

    def __len__(self) -> int:
        return len(self._sizes)

    @overload
    def __getitem__(self, i: int) -> LocalSegment: ...
    @overload
    def __getitem__(self, i: slice) -> list[LocalSegment]: ...
    def __getitem__(self, i: int | slice) -> LocalSegment | list[LocalSegment]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"rolled segment {i} of {len(self)}")
        base = self._bases[i]
        return LocalSegment(base, self._bases[i + 1], self._sizes[i], log_path(self._dir, base))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"RolledSegments({len(self)} segments in {self._dir!r})"


@dataclass
class LogDirCache:
    """What ``scan_log_dirs`` found in earlier rounds, reused while unchanged: each log
    dir's partition dir names (with their inodes) at its (inode, mtime), and the source
    of each partition dir found with a topic id. A source outlives a change of its log
    dir as long as its partition dir is the same directory (name and inode): Kafka
    rewrites its checkpoint files in the log dir every few seconds, which moves the log
    dir's mtime but changes no partition. A partition dir deleted and created again is a
    new directory: Kafka renames it away first (``-delete``) and removes it only a minute
    later, so its name is gone for a round or more and its inode cannot be reused before."""

    names: dict[Path, tuple[tuple[int, int], dict[str, int]]] = field(default_factory=dict)
    # per log dir, by partition dir name (no Path made or hashed per partition a round):
    # the source, and the partition dir's inode it was found at
    sources: dict[Path, dict[str, tuple[LogDirSource, int]]] = field(default_factory=dict)

    def dir_names(self, log_dir: Path) -> dict[str, int]:
        """The directories in ``log_dir`` by name, sorted, with their inodes."""
        st = os.stat(log_dir)
        key = (st.st_ino, st.st_mtime_ns)
        known = self.names.get(log_dir)
        if known is not None and known[0] == key:
            return known[1]
        # DirEntry.inode() is the d_ino the listing already holds: no stat per entry.
        found = sorted((e.name, e.inode()) for e in os.scandir(log_dir) if e.is_dir())
        names = dict(found)
        kept = self.sources.get(log_dir, {})
        for name in [n for n, (_, inode) in kept.items() if names.get(n) != inode]:
            del kept[name]
        if settled(st.st_mtime_ns):
            self.names[log_dir] = (key, names)
        else:
            self.names.pop(log_dir, None)
        return names

    def source(self, log_dir: Path, name: str) -> LogDirSource | None:
        kept = self.sources.get(log_dir)
        found = None if kept is None else kept.get(name)
        return None if found is None else found[0]

    def keep(self, log_dir: Path, name: str, source: LogDirSource, names: dict[str, int]) -> None:
        """Reuse ``source`` for ``log_dir/name`` while it is the directory in ``names``."""
        self.sources.setdefault(log_dir, {})[name] = (source, names[name])


__all__ = [
    "NO_LISTING",
    "SETTLED_S",
    "Listing",
    "LogDirCache",
    "RolledSegments",
    "log_path",
    "settled",
]
