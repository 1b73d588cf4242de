"""The sidecar's LogSource: a partition dir of a Kafka log dir, read-only.

Job: describe ``<log dir>/<topic>-<partition>/`` as Kafka's RemoteLogManager sees
its log (rolled segments, leader epochs, log start offset, last stable offset), and
find every offloadable partition dir under a set of log dirs.

Invariants: nothing here writes or deletes; the last stable offset is never past the
high watermark (``replication-offset-checkpoint``) nor past the first offset of a
transaction still open at the last roll (the newest producer snapshot; while the
broker is still writing that one, the one before, capped at its own offset), so an
uncommitted or unreplicated segment is never eligible; a segment whose files are
missing, truncated or corrupt raises SegmentCopyError naming the file.

Scale: a round over thousands of partitions must not cost time proportional to all
their segments. A directory's listing is reused while the directory's (inode, mtime)
is unchanged: Kafka creates, deletes and renames files (rolls, snapshots, checkpoints,
retention, compaction), each of which changes its directory's mtime. A listing is kept
only when that mtime is older than ``SETTLED_S`` at the time it was read: mtimes tick
coarsely, so a change in the same tick as a fresh mtime could leave it equal.

A partition whose active segment grows (its change token differs each round) must
not cost time proportional to its segments either: with a kept listing come its
rolled segments' sizes (a rolled segment is never written again), its producer
snapshots' offsets, the newest snapshot's open transactions (while the file's inode,
size and mtime stay, settled) and the leader epochs (likewise); the active segment's
end is found from the last entry of its preallocated offset index by a binary search,
once per view: a round's view stats the dir once and answers from that one listing.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from remote import SegmentFormatError
from remote.segment_data import log_segment_data
from remote.segments import (
    LogSegmentFiles,
    PartitionDir,
    offset_file_name,
    parse_partition_dir_name,
    read_producer_snapshot,
)
from remote.segments.partition_dir import LOG_SUFFIX, SNAPSHOT_SUFFIX
from rlmm.model import TopicIdPartition
from rlmm.offload.errors import LogDirError, SegmentCopyError
from rlmm.offload.log_source import (
    EpochStart,
    LocalSegment,
    LogSource,
    LogView,
    RetentionSettings,
    SegmentDescription,
)
from rlmm.offload.settings import INTERNAL_TOPICS, OffloadSettings

log = logging.getLogger(__name__)

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# A listing or change token is trusted only once its files' mtimes are this old.
SETTLED_S = 1.0
# A producer snapshot that does not parse is taken for one Kafka is writing (it creates
# the file, then writes it) while it is younger than this; older, it is corrupt.
SNAPSHOT_WRITE_S = 30.0


def _settled(*mtimes_ns: int) -> bool:
    """True when every mtime is at least SETTLED_S in the past (see the module doc)."""
    return time.time_ns() - max(mtimes_ns) >= SETTLED_S * 1e9


def _file_size(path: str) -> int:
    """A file's size; 0 once it is gone (deleted since it was listed: next round lists
    again)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise SegmentCopyError(f"{path}: cannot stat: {e}", path=path) from e


class _Listing:
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


_NO_LISTING = _Listing((0, 0), (), (), "")


def _log_path(directory: str, base_offset: int) -> str:
    """The path of the ``.log`` file of the segment at ``base_offset`` in ``directory``."""
    return os.path.join(directory, offset_file_name(base_offset, LOG_SUFFIX))


class _Rolled(Sequence[LocalSegment]):
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
        return LocalSegment(base, self._bases[i + 1], self._sizes[i], _log_path(self._dir, base))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"_Rolled({len(self)} segments in {self._dir!r})"


def _being_written(path: str | Path) -> bool:
    """A file the broker may still be writing: modified within SNAPSHOT_WRITE_S."""
    try:
        return time.time_ns() - os.stat(path).st_mtime_ns < SNAPSHOT_WRITE_S * 1e9
    except FileNotFoundError:
        return True  # deleted since it was listed (retention): the next round lists again


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


class LogDirSource(LogSource):
    """One Kafka partition dir; the log dir's checkpoints give the log start and HW."""

    def __init__(
        self,
        pdir: PartitionDir,
        retention: RetentionSettings,
        *,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        verify_crc: bool = True,
    ) -> None:
        self.pdir = pdir
        self._tp = pdir.topic_id_partition()
        self._retention = retention
        self._log_start = log_start_offset
        self._high_watermark = high_watermark
        self._verify_crc = verify_crc
        # The dir's listing at its (inode, mtime_ns), kept while that mtime is settled.
        # Only ints and strings: thousands of partitions keep theirs for good, and Path
        # objects per segment would cost tens of MiB and a longer walk for every
        # garbage collection.
        self._listing: _Listing | None = None
        self._last = _NO_LISTING  # the last listing, settled or not
        # plain strings: change_token stats them for every partition each round
        self._dir = str(pdir.path)
        self._epochs_file = os.path.join(self._dir, LEADER_EPOCH_CHECKPOINT)
        # (file key, value) of the leader epochs and of the newest producer snapshot's
        # open transactions, kept while the file's key is the same and settled
        self._epochs: tuple[tuple[int, int, int], tuple[EpochStart, ...]] | None = None
        self._snapshot: tuple[tuple[int, int, int, int], tuple[int, ...]] | None = None
        # The last LSO skipped a snapshot being written: no change token until one reads
        # it (writing into a file Kafka already created changes no mtime that the token
        # holds, so a round found idle would stay idle with the segment held back).
        self._snapshot_pending = False

    def __repr__(self) -> str:
        return f"LogDirSource({str(self.pdir.path)!r})"

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self._tp

    def set_offsets(self, log_start_offset: int | None, high_watermark: int | None) -> None:
        """The log dir's checkpoints as read this round (a source is kept across rounds)."""
        self._log_start = log_start_offset
        self._high_watermark = high_watermark

    def _listed(self, st: os.stat_result) -> _Listing:
        """The dir's listing, made again only when the dir changed (``st``: its stat)."""
        key = (st.st_ino, st.st_mtime_ns)
        if self._listing is not None and self._listing.key == key:
            return self._listing
        found = self.pdir.offsets_of(LOG_SUFFIX, SNAPSHOT_SUFFIX)
        bases = tuple(found[LOG_SUFFIX])
        active = _log_path(self._dir, bases[-1]) if bases else ""
        listing = _Listing(key, bases, tuple(found[SNAPSHOT_SUFFIX]), active)
        self._listing = listing if _settled(st.st_mtime_ns) else None
        self._last = listing
        return listing

    def _current(self) -> _Listing:
        listing = self._listed(os.stat(self._dir))
        if not listing.bases:
            raise LogDirError(f"{self.pdir.path}: no log segment")
        return listing

    def _files(self, bases: Sequence[int], i: int) -> LogSegmentFiles:
        base = bases[i]
        return LogSegmentFiles(
            base,
            self.pdir.path / offset_file_name(base, LOG_SUFFIX),
            bases[i + 1] if i + 1 < len(bases) else None,
            self.pdir,
        )

    def _rolled_sizes(self, listing: _Listing) -> tuple[int, ...]:
        """The rolled segments' sizes; stat'ed once per kept listing (a rolled segment
        is never written again; deleting or replacing one changes the listing)."""
        if listing.sizes is not None:
            return listing.sizes
        sizes = tuple(_file_size(_log_path(self._dir, base)) for base in listing.bases[:-1])
        if listing is self._listing:
            listing.sizes = sizes
        return sizes

    def view(self) -> LogView:
        """One listing (one stat of the dir) and one end offset for the whole view."""
        listing = self._current()
        rolled = self._rolled(listing)
        end = self._end_offset(listing)
        lso = self._stable_offset(listing, end)
        return LogView(
            rolled,
            self.leader_epochs(),
            self.log_start_offset(),
            end,
            lso,
            _file_size(listing.active),
        )

    def rolled_segments(self) -> Sequence[LocalSegment]:
        return self._rolled(self._current())

    def _rolled(self, listing: _Listing) -> _Rolled:
        return _Rolled(listing.bases, self._rolled_sizes(listing), self._dir)

    def active_segment_base_offset(self) -> int:
        return self._current().bases[-1]

    def active_segment_size(self) -> int:
        return _file_size(self._current().active)

    def log_start_offset(self) -> int:
        # Kafka checkpoints the whole log's start (below the local one once tiered);
        # without a checkpoint nothing may be deleted for being below it.
        return 0 if self._log_start is None else self._log_start

    def log_end_offset(self) -> int:
        return self._end_offset(self._current())

    def _end_offset(self, listing: _Listing) -> int:
        bases = listing.bases
        active = self._files(bases, len(bases) - 1)
        try:
            end = active.end_offset()
        except SegmentFormatError:
            end = None  # the broker is writing it: its base is a safe lower bound
        return active.base_offset if end is None else end + 1

    def last_stable_offset(self) -> int:
        return self._stable_offset(self._current())

    def _stable_offset(self, listing: _Listing, log_end_offset: int | None = None) -> int:
        """The LSO (see the module doc); ``log_end_offset``: the listing's, when known."""
        if self._high_watermark is not None:
            lso = self._high_watermark
        else:
            lso = self._end_offset(listing) if log_end_offset is None else log_end_offset
        cap: int | None = None  # set once a newer snapshot was skipped
        for offset in reversed(listing.snapshots):
            path = os.path.join(self._dir, offset_file_name(offset, SNAPSHOT_SUFFIX))
            try:
                open_txns = self._open_transactions(offset, path)
            except SegmentFormatError as e:
                if not _being_written(path):
                    raise LogDirError(f"{path}: unreadable producer snapshot: {e}") from e
                # Kafka creates the file, then writes it (ProducerStateManager's
                # writeSnapshot), so the state at that roll is not known yet. An older
                # snapshot bounds the LSO soundly only capped at its own offset: a
                # transaction opened after it is not in it.
                log.debug("%s: being written by the broker (%s); read next round", path, e)
                cap = offset
                continue
            self._snapshot_pending = cap is not None
            bound = offset if cap is not None else lso
            return min(lso, bound, *open_txns)
        # No snapshot at all, or none written yet: with one being written, nothing is
        # known to be stable this round.
        self._snapshot_pending = cap is not None
        return lso if cap is None else min(lso, self.log_start_offset())

    def _open_transactions(self, offset: int, path: str) -> tuple[int, ...]:
        """The first offsets of the transactions open in the producer snapshot at
        ``path`` (SegmentFormatError when it does not parse), read again only when the
        file's (inode, size, mtime) changed or were not settled: Kafka writes a snapshot
        once, after creating it."""
        try:
            st: os.stat_result | None = os.stat(path)
        except OSError:
            st = None  # gone since listed: read_producer_snapshot says so
        key = None if st is None else (offset, st.st_ino, st.st_size, st.st_mtime_ns)
        if key is not None and self._snapshot is not None and self._snapshot[0] == key:
            return self._snapshot[1]
        entries = read_producer_snapshot(path)
        txns = tuple(e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0)
        if key is not None and st is not None and _settled(st.st_mtime_ns):
            self._snapshot = (key, txns)
        return txns

    def leader_epochs(self) -> Sequence[EpochStart]:
        try:
            st = os.stat(self._epochs_file)
        except FileNotFoundError:
            return ()
        except OSError as e:
            raise LogDirError(f"{self._epochs_file}: cannot stat: {e}") from e
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._epochs is not None and self._epochs[0] == key:
            return self._epochs[1]
        try:
            epochs = tuple(EpochStart(e.epoch, e.start_offset) for e in self.pdir.leader_epochs())
        except SegmentFormatError as e:
            raise LogDirError(str(e)) from e
        # Kafka replaces the file (a new inode) to change it: read after the stat, the
        # epochs are at least as new as the key they are kept under.
        if _settled(st.st_mtime_ns):
            self._epochs = (key, epochs)
        return epochs

    def current_leader_epoch(self) -> int:
        epochs = self.leader_epochs()
        return epochs[-1].epoch if epochs else 0

    def retention(self) -> RetentionSettings:
        return self._retention

    def change_token(self) -> Hashable | None:
        """The dir's, the active segment's and the leader-epoch checkpoint's (inode, size,
        mtime), and the log start offset and high watermark: every other answer derives
        from these (a rolled segment is never written again; anything else Kafka does
        creates, deletes or renames a file). None while one of them changed within
        SETTLED_S, or when one cannot be read, or while a producer snapshot was last
        found being written (then nothing is promised)."""
        if self._snapshot_pending:
            return None
        try:
            d = os.stat(self._dir)
            listing = self._listed(d)
            if not listing.bases:
                return None
            a = os.stat(listing.active)
            try:
                e = os.stat(self._epochs_file)
                epochs = (e.st_ino, e.st_size, e.st_mtime_ns)
            except FileNotFoundError:
                epochs = None
        except OSError:
            return None
        if not _settled(d.st_mtime_ns, a.st_mtime_ns, epochs[2] if epochs else 0):
            return None
        return (
            d.st_ino, d.st_mtime_ns, listing.bases[-1], a.st_ino, a.st_size, a.st_mtime_ns,
            epochs, self._log_start, self._high_watermark,
        )  # fmt: skip

    def set_retention(self, retention: RetentionSettings) -> None:
        """The topic's settings as this round resolved them (the cluster's configs)."""
        self._retention = retention

    def _find(self, bases: tuple[int, ...], base_offset: int) -> LogSegmentFiles | None:
        i = bisect.bisect_left(bases, base_offset)
        return self._files(bases, i) if i < len(bases) and bases[i] == base_offset else None

    def largest_timestamp(self, segment: LocalSegment) -> int | None:
        """From the time index's last entry (Kafka appends the segment's largest
        timestamp there at the roll) and the batches after the last offset index entry:
        a few KiB read, no CRC pass. None when the files cannot be read (the copy, which
        reads them whole, then says which file is wrong)."""
        files = self._find(self._last.bases, segment.base_offset)
        if files is None:
            return None
        try:
            return files.summary(full_scan=False).max_timestamp_ms
        except (SegmentFormatError, OSError):
            return None

    def describe(self, segment: LocalSegment) -> SegmentDescription:
        # As listed last (the round's view of the log); listed again if not there.
        files = self._find(self._last.bases, segment.base_offset)
        if files is None:
            self._current()
            files = self._find(self._last.bases, segment.base_offset)
        if files is None:
            raise SegmentCopyError(f"{segment.name}: segment is gone", path=segment.name)
        for path in (files.log_path, files.offset_index_path, files.time_index_path):
            if not path.is_file():
                raise SegmentCopyError(f"{path}: missing; segment not copied", path=str(path))
        try:
            summary = files.summary(full_scan=self._verify_crc, verify_crc=self._verify_crc)
            if summary.producer_snapshot_path is None:
                missing = files.log_path.with_name(f"{segment.next_base_offset:020d}.snapshot")
                raise SegmentCopyError(
                    f"{missing}: producer snapshot of {files.log_path.name} is missing;"
                    " segment not copied",
                    path=str(missing),
                )
            # Checked, not only listed: Kafka creates a snapshot before writing it, and
            # an empty or torn one must never reach the remote store.
            read_producer_snapshot(summary.producer_snapshot_path)
            data = log_segment_data(files, summary)
        except SegmentFormatError as e:
            raise SegmentCopyError(
                f"{e} (segment not copied)", path=getattr(e, "path", None) or str(files.log_path)
            ) from e
        if summary.next_offset > segment.next_base_offset:
            raise SegmentCopyError(
                f"{files.log_path}: records run to offset {summary.end_offset}, past the next"
                f" segment's base {segment.next_base_offset}",
                path=str(files.log_path),
            )
        return SegmentDescription(
            base_offset=summary.base_offset,
            end_offset=summary.end_offset,
            max_timestamp_ms=summary.max_timestamp_ms,
            size_in_bytes=summary.size_in_bytes,
            segment_leader_epochs=summary.segment_leader_epochs,
            txn_index_empty=summary.txn_index_empty,
            data=data,
        )


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
        if _settled(st.st_mtime_ns):
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


def scan_log_dirs(
    log_dirs: Iterable[Path],
    settings: OffloadSettings,
    warned: set[str] | None = None,
    disabled: list[LogDirSource] | None = None,
    cache: LogDirCache | None = None,
) -> list[LogDirSource]:
    """A source per offloadable partition dir; dirs without a topic id warn once
    (``warned``); ``disabled`` gets those of topics with remote.storage.enable false
    (whose remote data KIP-950 may delete). With ``cache`` (kept across rounds), an
    unchanged log dir is not listed again and a partition's source is the one of the
    earlier round, with this round's checkpoints."""
    warned = set() if warned is None else warned
    cache = LogDirCache() if cache is None else cache
    sources: list[LogDirSource] = []
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            raise LogDirError(f"log dir {log_dir} does not exist or is not a directory")
        starts = read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        watermarks = read_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        names = cache.dir_names(log_dir)
        for name in names:
            source = cache.source(log_dir, name)
            if source is None:
                path = log_dir / name
                source = _source(path, settings, starts, watermarks, warned, disabled is not None)
                if source is None:
                    continue  # not ours, or no topic id yet: looked at again next round
                cache.keep(log_dir, name, source, names)
            else:
                key = (source.pdir.topic, source.pdir.partition)
                source.set_offsets(starts.get(key), watermarks.get(key))
            if settings.offloads(source.topic_id_partition.topic):
                sources.append(source)
            elif disabled is not None:
                disabled.append(source)
    return sources


def _source(
    path: Path,
    settings: OffloadSettings,
    starts: dict[tuple[str, int], int],
    watermarks: dict[tuple[str, int], int],
    warned: set[str],
    include_disabled: bool = False,
) -> LogDirSource | None:
    def warn_once(why: str) -> None:
        if str(path) not in warned:
            warned.add(str(path))
            log.warning("skipping %s: %s", path, why)

    if path.name.endswith(("-delete", "-future", "-stray")):
        return None  # being deleted or moved by the broker: not ours to read
    try:
        pdir = PartitionDir(path)
    except SegmentFormatError:
        return None  # not a partition dir (e.g. the KRaft metadata's siblings)
    if pdir.topic in INTERNAL_TOPICS or not (include_disabled or settings.offloads(pdir.topic)):
        return None
    try:
        if pdir.topic_id is None:
            warn_once("no topic id (partition.metadata is missing)")
            return None
    except SegmentFormatError as e:
        warn_once(f"unreadable partition.metadata: {e}")
        return None
    key = (pdir.topic, pdir.partition)
    return LogDirSource(
        pdir,
        settings.retention_for(pdir.topic),
        log_start_offset=starts.get(key),
        high_watermark=watermarks.get(key),
        verify_crc=settings.verify_crc,
    )


__all__ = ["LogDirCache", "LogDirSource", "read_offset_checkpoint", "scan_log_dirs"]
