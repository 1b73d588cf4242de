"""From a rolled segment in a Kafka partition dir to what an RSM copies (LogSegmentData),
and the smallest record timestamp an RSM records in its manifest.

Invariant: the leader epoch bytes hold only the checkpoint entries that start before
the segment's next offset (Kafka hands the RSM the checkpoint truncated that way),
and a segment without its producer snapshot is refused, as Kafka refuses it. The
smallest timestamp is the one the caller's full scan found, else one pass over the
log file; a file that does not parse gives None (unknown), never a failed copy.
"""

from __future__ import annotations

import logging
import os

from remote._file_copy import mapped
from remote.errors import InvalidSegmentDataError, SegmentFormatError
from remote.segments import (
    LogSegmentFiles,
    LogSegmentSummary,
    RecordBatchReader,
    encode_leader_epoch_checkpoint,
)
from remote.segments.timestamps import SmallestTimestamp
from remote.storage import LogSegmentData

log = logging.getLogger(__name__)


def log_segment_data(segment: LogSegmentFiles, summary: LogSegmentSummary) -> LogSegmentData:
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
        smallest_timestamp_ms=summary.smallest_timestamp_ms,
    )


def smallest_timestamp(segment_data: LogSegmentData) -> int | None:
    """The segment's smallest record timestamp: the caller's, or one scan of its batches
    (a LogSegmentData built by a broker that did not read them); None when the log file
    does not parse (the copy goes on: it stores bytes, it does not judge them)."""
    if segment_data.smallest_timestamp_ms is not None:
        return segment_data.smallest_timestamp_ms
    path = segment_data.log_segment
    smallest = SmallestTimestamp(str(path))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise InvalidSegmentDataError(f"cannot read segment file {path}: {e}") from e
    try:
        # scanned in place in the page cache (the copy just read it): see _file_copy
        with mapped(fd, os.fstat(fd).st_size) as view:
            for header, data in RecordBatchReader(view, name=str(path)).batches():
                smallest.add(header, data)
    except SegmentFormatError as e:
        log.warning("%s: smallest timestamp unknown, not recorded in the manifest: %s", path, e)
        return None
    except (OSError, ValueError) as e:
        raise InvalidSegmentDataError(f"cannot read segment file {path}: {e}") from e
    finally:
        os.close(fd)
    return smallest.value


__all__ = ["log_segment_data", "smallest_timestamp"]
