"""The sidecar's LogSource: a partition dir of a Kafka log dir, read-only.

Job: describe ``<log dir>/<topic>-<partition>/`` as Kafka's RemoteLogManager sees
its log (rolled segments, leader epochs, log start offset, last stable offset), and
find every offloadable partition dir under a set of log dirs.

Invariants: nothing here writes or deletes; the last stable offset is the one the
broker answered this round (``set_stable_offset``: its in-memory LSO, which already
holds back open transactions) capped at the local log end; without that answer it is
never past the high watermark (``replication-offset-checkpoint``, which Kafka rewrites
only every few seconds; a partition that file does not list yet, in a log dir that
has one, has nothing known to be replicated: no segment is eligible) nor past the
first offset of a transaction still open at the last roll (the newest producer
snapshot; while the broker is still writing that one, the one before, capped at its
own offset); so an uncommitted or unreplicated segment
is never eligible; a segment whose files are missing, truncated or corrupt raises
SegmentCopyError naming the file.

Scale: a round over thousands of partitions must not cost time proportional to all
their segments: a partition dir's listing is kept while the dir is unchanged
(``dir_listings``).

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
import logging
import os
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from remote import SegmentFormatError
from remote.segments import LogSegmentFiles, PartitionDir, offset_file_name, read_producer_snapshot
from remote.segments.partition_dir import LOG_SUFFIX, SNAPSHOT_SUFFIX
from rlmm.model import TopicIdPartition
from rlmm.offload.dir_listings import (
    NO_LISTING,
    Listing,
    LogDirCache,
    RolledSegments,
    log_path,
    settled,
)
from rlmm.offload.errors import LogDirError, SegmentCopyError
from rlmm.offload.log_dirs import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    log_dir_problem,
    read_offset_checkpoint,
)
from rlmm.offload.log_source import (
    EpochStart,
    LocalSegment,
    LogSource,
    LogView,
    RetentionSettings,
    SegmentDescription,
)
from rlmm.offload.segment_description import describe_segment
from rlmm.offload.settings import INTERNAL_TOPICS, OffloadSettings

log = logging.getLogger(__name__)

# A producer snapshot that does not parse is taken for one Kafka is writing (it creates
# the file, then writes it) while it is younger than this; older, it is corrupt.
SNAPSHOT_WRITE_S = 30.0


def _file_size(path: str) -> int:
    """A file's size; 0 once it is gone (deleted since it was listed: next round lists
    again)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise SegmentCopyError(f"{path}: cannot stat: {e}", path=path) from e


def _being_written(path: str | Path) -> bool:
    """A file the broker may still be writing: modified within SNAPSHOT_WRITE_S."""
    try:
        return time.time_ns() - os.stat(path).st_mtime_ns < SNAPSHOT_WRITE_S * 1e9
    except FileNotFoundError:
        return True  # deleted since it was listed (retention): the next round lists again


class LogDirSource(LogSource):
    """One Kafka partition dir; the log dir's checkpoints give the log start and HW, the
    broker (when asked) the last stable offset."""

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
        # The broker's in-memory LSO as asked this round (None: not asked, or no answer).
        self._broker_stable: int | None = None
        self._verify_crc = verify_crc
        # The dir's listing at its (inode, mtime_ns), kept while that mtime is settled.
        # Only ints and strings: thousands of partitions keep theirs for good, and Path
        # objects per segment would cost tens of MiB and a longer walk for every
        # garbage collection.
        self._listing: Listing | None = None
        self._last = NO_LISTING  # the last listing, settled or not
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

    def set_stable_offset(self, stable_offset: int | None) -> None:
        """The partition's last stable offset as its leader, this broker, answered for
        this round (None: unknown; the checkpoint and producer snapshots bound it)."""
        self._broker_stable = stable_offset

    def _listed(self, st: os.stat_result) -> Listing:
        """The dir's listing, made again only when the dir changed (``st``: its stat)."""
        key = (st.st_ino, st.st_mtime_ns)
        if self._listing is not None and self._listing.key == key:
            return self._listing
        found = self.pdir.offsets_of(LOG_SUFFIX, SNAPSHOT_SUFFIX)
        bases = tuple(found[LOG_SUFFIX])
        active = log_path(self._dir, bases[-1]) if bases else ""
        listing = Listing(key, bases, tuple(found[SNAPSHOT_SUFFIX]), active)
        self._listing = listing if settled(st.st_mtime_ns) else None
        self._last = listing
        return listing

    def _current(self) -> Listing:
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

    def _rolled_sizes(self, listing: Listing) -> tuple[int, ...]:
        """The rolled segments' sizes; stat'ed once per kept listing (a rolled segment
        is never written again; deleting or replacing one changes the listing)."""
        if listing.sizes is not None:
            return listing.sizes
        sizes = tuple(_file_size(log_path(self._dir, base)) for base in listing.bases[:-1])
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

    def _rolled(self, listing: Listing) -> RolledSegments:
        return RolledSegments(listing.bases, self._rolled_sizes(listing), self._dir)

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

    def _end_offset(self, listing: Listing) -> int:
        bases = listing.bases
        active = self._files(bases, len(bases) - 1)
        try:
            end = active.end_offset()
        except SegmentFormatError:
            end = None  # the broker is writing it: its base is a safe lower bound
        return active.base_offset if end is None else end + 1

    def last_stable_offset(self) -> int:
        return self._stable_offset(self._current())

    def _stable_offset(self, listing: Listing, log_end_offset: int | None = None) -> int:
        """The LSO (see the module doc); ``log_end_offset``: the listing's, when known."""
        if self._broker_stable is not None:
            # Kafka's own RemoteLogManager bounds its copies by this one, and its open
            # transactions are in it: a snapshot taken at the last roll would hold back,
            # until the next roll, a transaction committed since.
            self._snapshot_pending = False
            end = self._end_offset(listing) if log_end_offset is None else log_end_offset
            return min(self._broker_stable, end)
        if self._high_watermark == NOT_CHECKPOINTED:
            return self.log_start_offset()
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
        if key is not None and st is not None and settled(st.st_mtime_ns):
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
        if settled(st.st_mtime_ns):
            self._epochs = (key, epochs)
        return epochs

    def current_leader_epoch(self) -> int:
        epochs = self.leader_epochs()
        return epochs[-1].epoch if epochs else 0

    def retention(self) -> RetentionSettings:
        return self._retention

    def change_token(self) -> Hashable | None:
        """The dir's, the active segment's and the leader-epoch checkpoint's (inode, size,
        mtime), and the log start offset, high watermark and the broker's last stable
        offset (it moves while the leader's files do not: the high watermark advances as
        followers fetch): every other answer derives from these (a rolled segment is
        never written again; anything else Kafka does creates, deletes or renames a
        file). None while one of them changed within SETTLED_S, or when one cannot be
        read, or while a producer snapshot was last found being written (then nothing
        is promised)."""
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
        if not settled(d.st_mtime_ns, a.st_mtime_ns, epochs[2] if epochs else 0):
            return None
        return (
            d.st_ino, d.st_mtime_ns, listing.bases[-1], a.st_ino, a.st_size, a.st_mtime_ns,
            epochs, self._log_start, self._high_watermark, self._broker_stable,
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
        return describe_segment(files, segment, self._verify_crc)


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
        checkpoints = _Checkpoints.read(log_dir)
        names = cache.dir_names(log_dir)
        for name in names:
            source = cache.source(log_dir, name)
            if source is None:
                path = log_dir / name
                source = _source(path, settings, checkpoints, warned, disabled is not None)
                if source is None:
                    continue  # not ours, or no topic id yet: looked at again next round
                cache.keep(log_dir, name, source, names)
            else:
                source.set_offsets(*checkpoints.offsets(source.pdir.topic, source.pdir.partition))
            if settings.offloads(source.topic_id_partition.topic):
                sources.append(source)
            elif disabled is not None:
                disabled.append(source)
    return sources


NOT_CHECKPOINTED = -1
"""The high watermark of a partition the log dir's checkpoint does not list yet."""


@dataclass(frozen=True)
class _Checkpoints:
    """One log dir's offset checkpoints, as read this round."""

    starts: dict[tuple[str, int], int]
    watermarks: dict[tuple[str, int], int]
    unlisted: int | None  # the high watermark of a partition the checkpoint does not list

    @classmethod
    def read(cls, log_dir: Path) -> _Checkpoints:
        checkpoint = log_dir / REPLICATION_OFFSET_CHECKPOINT
        return cls(
            read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT),
            read_offset_checkpoint(checkpoint),
            # A broker's log dir has the file (empty until its first checkpoint): a
            # partition it does not list has no known high watermark, not the log end.
            NOT_CHECKPOINTED if checkpoint.exists() else None,
        )

    def offsets(self, topic: str, partition: int) -> tuple[int | None, int | None]:
        """The partition's log start offset and high watermark (None: unknown)."""
        key = (topic, partition)
        return self.starts.get(key), self.watermarks.get(key, self.unlisted)


def _source(
    path: Path,
    settings: OffloadSettings,
    checkpoints: _Checkpoints,
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
    log_start_offset, high_watermark = checkpoints.offsets(pdir.topic, pdir.partition)
    return LogDirSource(
        pdir,
        settings.retention_for(pdir.topic),
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
        verify_crc=settings.verify_crc,
    )


__all__ = [
    "LogDirCache",
    "LogDirSource",
    "log_dir_problem",
    "read_offset_checkpoint",
    "scan_log_dirs",
]
