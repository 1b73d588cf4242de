"""From a rolled segment in a Kafka partition dir to what an RSM copies (LogSegmentData).

Invariant: the leader epoch bytes hold only the checkpoint entries that start before
the segment's next offset (Kafka hands the RSM the checkpoint truncated that way),
and a segment without its producer snapshot is refused, as Kafka refuses it.
"""

from __future__ import annotations

from remote.errors import SegmentFormatError
from remote.segments import (
    LogSegmentFiles,
    SegmentSummary,
    encode_leader_epoch_checkpoint,
)
from remote.storage import LogSegmentData


def log_segment_data(segment: LogSegmentFiles, summary: SegmentSummary) -> LogSegmentData:
    """The LogSegmentData of a rolled segment described by ``summary``."""
    if summary.producer_snapshot_path is None:
        raise SegmentFormatError(
            f"{segment.log_path}: no producer snapshot at offset {summary.next_offset};"
            " Kafka copies one with every segment",
            str(segment.log_path),
        )
    epochs = segment.partition_dir.leader_epochs() if segment.partition_dir else []
    return LogSegmentData(
        log_segment=segment.log_path,
        offset_index=segment.offset_index_path,
        time_index=segment.time_index_path,
        transaction_index=None if summary.txn_index_empty else segment.txn_index_path,
        producer_snapshot_index=summary.producer_snapshot_path,
        leader_epoch_index=encode_leader_epoch_checkpoint(
            e for e in epochs if e.start_offset < summary.next_offset
        ),
    )


__all__ = ["log_segment_data"]
