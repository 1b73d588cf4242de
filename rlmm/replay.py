"""Replay of the remote log metadata: event-log records become the state of one store.

The one place where records are decoded, redelivered copies recognised and events
applied to a RemotePartitionMetadataStore, and where a snapshot and the tail after it
are put together. The manager's apply loops and the archive's read-only view both
replay through a :class:`MetadataReplay`, so the same events give the same state in
either of them.

Invariants:
- ``store`` holds exactly the effect of the events ``0..applied[p]`` of each metadata
  partition ``p`` in ``applied``; a record at or below ``applied[p]`` is never applied
  again (replays are idempotent);
- a record that does not decode, a redelivered copy of an event that took effect and
  an event the store refuses are skipped and counted, never fatal; the first and the
  last are logged and handed to the ``rejected`` callback. A restored snapshot block
  that does not decode (SnapshotBlockError) is no event's fault: it propagates, and
  the partition is replayed from offset 0 (:meth:`MetadataReplay.reset`);
- a snapshot is restored only into the partitioning it was written for, and a
  partition the snapshot saw further than the log now reaches is replayed from 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eventlog import EventLog
from rlmm.cache import RemotePartitionMetadataStore, StoreState
from rlmm.codec import decode
from rlmm.errors import CodecError, RemoteStorageError, ReplayGapError, SnapshotBlockError
from rlmm.partitioning import metadata_partition_for
from snapshot import Snapshot

log = logging.getLogger(__name__)

# Told of each record skipped as undecodable or illegal:
# (metadata partition, offset, the error, the message logged).
Rejected = Callable[[int, int, RemoteStorageError, str], None]
# Above every Kafka offset (int64): "no end" without a test per record.
_NO_END = 1 << 63


@dataclass
class ReplayStats:
    """What a replay did (the manager's and the archive view's stats extend it)."""

    applied_events: int = 0
    skipped_undecodable: int = 0
    skipped_invalid: int = 0
    skipped_duplicates: int = 0  # redelivered copies of applied events (producer retries)
    full_replays: int = 0  # metadata partitions replayed from offset 0 despite a snapshot
    restored_from_snapshot: bool = False


class MetadataReplay:
    """One store, the offset applied to it per metadata partition, and the counters."""

    def __init__(
        self, partition_count: int, stats: ReplayStats, *, rejected: Rejected | None = None
    ) -> None:
        self.partition_count = partition_count
        self.stats = stats
        self.store = RemotePartitionMetadataStore()
        # metadata partition -> last offset applied (-1: none yet)
        self.applied: dict[int, int] = {}
        self._rejected = rejected

    # ---- a snapshot -------------------------------------------------------------------

    def restore(self, snap: Snapshot, source: str = "a snapshot") -> bool:
        """Start from ``snap``: its state (blocks decoded on first use) and applied
        offsets. False, changing nothing, if it was written for another partitioning."""
        if snap.partition_count != self.partition_count:
            log.warning(
                "ignoring snapshot for %d metadata partitions (the log has %d): full replay",
                snap.partition_count,
                self.partition_count,
            )
            return False
        self.store.load_state(snap.state, source=source)
        self.applied.update(snap.applied_offsets)
        self.stats.restored_from_snapshot = True
        return True

    def adopt(self, p: int, snap: Snapshot) -> None:
        """Replace metadata partition ``p``'s state with ``snap``'s (its other partitions
        left out); the tail is replayed from the snapshot's applied offset of ``p``."""
        staged = RemotePartitionMetadataStore()
        staged.load_state(snap.state)
        n = self.partition_count
        tps = [tp for tp in staged.partitions() if metadata_partition_for(tp, n) == p]
        self.forget(p)
        self.store.load_state(staged.to_state(tps))
        self.applied[p] = snap.applied_offsets[p]

    def snapshot_state(self) -> tuple[dict[int, int], StoreState] | None:
        """(applied offsets, state) for a snapshot, of the partitions with something
        applied (one with nothing replays from 0 without an entry); None if none has."""
        applied = {p: o for p, o in self.applied.items() if o >= 0}
        if not applied:
            return None
        n = self.partition_count
        tps = [tp for tp in self.store.partitions() if metadata_partition_for(tp, n) in applied]
        return applied, self.store.to_state(tps)

    def forget(self, p: int) -> None:
        """Drop metadata partition ``p``: its user partitions and its applied offset."""
        self.applied.pop(p, None)
        n = self.partition_count
        self.store.drop(lambda tp: metadata_partition_for(tp, n) != p)

    def reset(self, p: int, error: SnapshotBlockError) -> None:
        """Drop metadata partition ``p``'s restored state: it is replayed from offset 0."""
        log.error("%s; replaying metadata partition %d from offset 0", error, p)
        self.stats.full_replays += 1
        self.forget(p)
        self.applied[p] = -1

    def check_end(self, p: int, end: int) -> bool:
        """Forget ``p`` if the snapshot saw events the log, which ends before ``end``,
        no longer has (trust the log: replay it from 0). True if it did."""
        if self.applied.get(p, -1) <= end - 1:
            return False
        log.warning(
            "snapshot of metadata partition %d is at offset %d but the log ends at %d;"
            " replaying the partition from offset 0",
            p,
            self.applied[p],
            end - 1,
        )
        self.forget(p)
        self.stats.full_replays += 1
        return True

    # ---- records ----------------------------------------------------------------------

    def apply_batch(
        self, p: int, batch: Sequence[tuple[int, bytes]], end: int | None = None
    ) -> None:
        """Apply the records of ``batch`` above ``applied[p]`` (and below ``end``) in
        order. A SnapshotBlockError leaves ``applied[p]`` as it was: :meth:`reset`."""
        applied = self.applied.get(p, -1)
        stop = _NO_END if end is None else end
        for offset, value in batch:
            if offset <= applied:
                continue
            if offset >= stop:
                break
            self.apply_record(p, offset, value)
            applied = offset
        self.applied[p] = applied

    def apply_record(self, p: int, offset: int, value: bytes) -> None:
        """Decode, skip a redelivered copy, apply; what cannot be applied is skipped."""
        try:
            event = decode(value)
        except CodecError as e:
            self._reject(p, offset, e, "undecodable record")
            self.stats.skipped_undecodable += 1
            return
        if self.store.is_redelivery(event):
            self.stats.skipped_duplicates += 1
            return
        try:
            # A cold partition queues the record as read (bytes): decoded again on use.
            self.store.apply(event, value if type(value) is bytes else None)
        except SnapshotBlockError:
            raise  # not the event's fault: the partition is replayed from the log
        except RemoteStorageError as e:
            self._reject(p, offset, e, "illegal event")
            self.stats.skipped_invalid += 1
            return
        except Exception as e:  # a bug must not stop a replay
            self._reject(p, offset, RemoteStorageError(f"applying event failed: {e!r}"), "error")
            self.stats.skipped_invalid += 1
            return
        self.stats.applied_events += 1

    def _reject(self, p: int, offset: int, error: RemoteStorageError, what: str) -> None:
        message = f"metadata partition {p} offset {offset}: skipped {what}: {error}"
        log.warning(message)
        if self._rejected is not None:
            self._rejected(p, offset, error, message)

    # ---- the tail up to a known end -----------------------------------------------------

    async def replay_to(self, event_log: EventLog, ends: Mapping[int, int]) -> None:
        """Apply every partition's records after ``applied[p]`` and before ``ends[p]``
        (end offsets read beforehand), partitions concurrently; afterwards each
        partition of ``ends`` is in ``applied`` (-1: nothing in it).

        ReplayGapError if the log no longer holds offsets the replay needs."""
        for p, end in ends.items():
            self.check_end(p, end)
        todo = [p for p, end in ends.items() if self.applied.get(p, -1) + 1 < end]
        await asyncio.gather(*(self._replay_partition(event_log, p, ends[p]) for p in todo))
        for p in ends:
            self.applied.setdefault(p, -1)

    async def _replay_partition(self, event_log: EventLog, p: int, end: int) -> None:
        while True:
            start = self.applied.get(p, -1) + 1
            batches = event_log.read_batches(p, start)
            try:
                async with contextlib.aclosing(batches):  # type: ignore[type-var]
                    async for batch in batches:
                        if self.applied.get(p, -1) == start - 1 and batch and batch[0][0] > start:
                            # Retention deleted events the replay needs: the state would
                            # be silently incomplete, so refuse.
                            raise ReplayGapError(
                                f"metadata partition {p}: the event log starts at offset"
                                f" {batch[0][0]} but the replay needs offsets from {start}"
                                " (deleted by retention?); no snapshot covers them"
                            )
                        self.apply_batch(p, batch, end)
                        if batch and batch[-1][0] >= end - 1:
                            return
                return
            except SnapshotBlockError as e:
                self.reset(p, e)  # and read again from offset 0


__all__ = ["MetadataReplay", "Rejected", "ReplayStats"]
