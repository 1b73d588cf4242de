"""Archive: what the metadata says one partition's remote archive holds.

Invariants: the archive's end is read along the leader's epoch lineage (Kafka's rule,
with KAFKA-15241), never past the end of the epoch it was found in; the copy goes back
to a hole below that end only while the local log still holds the hole's start (the
archive heals what it lost instead of keeping a gap); the unarchived tail exported
counts the active segment too (Kafka never copies it, and RemoteCopyLag leaves it out).
Nothing here writes the metadata: it reads it and sets gauges.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rlmm.model import RemoteLogSegmentState, TopicIdPartition
from rlmm.offload.log_source import EpochStart, LogView, epoch_end_offsets
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload_metadata import OffloadMetadataManager

# The RemoteLogManager's lines keep the logger name operators filter on, whichever
# module says them.
log = logging.getLogger("rlmm.offload.remote_log_manager")

FINISHED_STATE = frozenset({RemoteLogSegmentState.COPY_SEGMENT_FINISHED})


class Archive:
    """The archive's end, holes and size per partition, from one metadata manager."""

    def __init__(self, manager: OffloadMetadataManager, metrics: OffloadMetrics) -> None:
        self._manager = manager
        self._metrics = metrics

    def end(
        self, tp: TopicIdPartition, epochs: Sequence[EpochStart], log_end_offset: int
    ) -> tuple[int, int | None]:
        """The highest offset in remote storage along the lineage (-1: none), and the
        leader epoch it was found in (Kafka's rule, with KAFKA-15241)."""
        ends = epoch_end_offsets(epochs, log_end_offset)
        for entry in reversed(epochs):
            offset = self._manager.highest_offset_for_epoch(tp, entry.epoch)
            if offset is not None:
                return min(offset, ends[entry.epoch] - 1), entry.epoch
        return -1, None

    def highest(
        self, tp: TopicIdPartition, epochs: Sequence[EpochStart], log_end_offset: int
    ) -> int:
        return self.end(tp, epochs, log_end_offset)[0]

    def continue_after(self, tp: TopicIdPartition, copied: int, view: LogView) -> int:
        """``copied``, or the end of the archive's first hole below it when the local log
        still holds the hole's start (so copying goes back and fills it)."""
        end = self._manager.contiguous_end_offset(tp, FINISHED_STATE)
        if end is None:
            return copied
        local_start = view.local_start_offset
        if end < copied and end + 1 >= max(local_start, view.log_start_offset):
            log.warning(
                "%s: offsets %d.. are missing from remote storage below its highest offset %d"
                " (a finished copy was deleted): copying them again from the local log",
                tp, end + 1, copied,
            )  # fmt: skip
            return end
        return copied

    def _newest_timestamp(self, tp: TopicIdPartition, epoch: int | None, end: int) -> int | None:
        """The max timestamp of the FINISHED segment holding the archive's end ``end``
        (found in ``epoch``); None when no FINISHED segment is left (retention emptied
        the archive: ``highest_offset_for_epoch`` keeps what was copied, as Kafka's)."""
        if epoch is None:
            return None
        segment = self._manager.remote_log_segment_metadata(tp, epoch, end)
        if segment is not None:
            return segment.max_timestamp_ms
        # Rare (a lineage cut inside the epoch): the newest FINISHED segment below it.
        newest = None
        for s in self._manager.walk_segment_summaries(tp, FINISHED_STATE):
            if s.start_offset <= end and (newest is None or s.start_offset >= newest[0]):
                newest = (s.start_offset, s.max_timestamp_ms)
        return None if newest is None else newest[1]

    def record_unarchived(self, tp: TopicIdPartition, view: LogView) -> None:
        """Export what of ``tp``'s local log the archive lacks: the offsets from the
        archive's end (or the log start) to the log end and the bytes of the local
        segments holding them, the active segment included (Kafka never copies it, and
        RemoteCopyLag leaves it out), and when the newest archived record was written."""
        end, epoch = self.end(tp, view.epochs, view.log_end_offset)
        start = max(end + 1, view.log_start_offset)
        offsets = max(0, view.log_end_offset - start)
        nbytes = view.local_bytes_from(start) if offsets else 0
        newest = self._newest_timestamp(tp, epoch, end)
        self._metrics.set_unarchived(tp, offsets, nbytes, newest)

    def record_size(self, tp: TopicIdPartition) -> None:
        """Export the partition's remote bytes and segment count (RemoteLogSizeBytes...)."""
        count = self._manager.remote_log_segment_count(tp)
        self._metrics.set_remote_log(tp, self._manager.remote_log_size(tp), count)


__all__ = ["FINISHED_STATE", "Archive"]
