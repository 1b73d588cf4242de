"""Segment description: a rolled segment's files, checked whole, as a copy uploads them.

Invariant: a description is made only of a segment whose log, offset index, time index
and producer snapshot are all present, parse (with every batch's CRC checked when
``verify_crc``), and whose records stop before the next segment's base; anything else
raises SegmentCopyError naming the file at fault, and nothing is uploaded.
"""

from __future__ import annotations

from remote import SegmentFormatError
from remote.segment_data import log_segment_data
from remote.segments import LogSegmentFiles, read_producer_snapshot
from rlmm.offload.errors import SegmentCopyError
from rlmm.offload.log_source import LocalSegment, SegmentDescription


def describe_segment(
    files: LogSegmentFiles, segment: LocalSegment, verify_crc: bool
) -> SegmentDescription:
    """``segment``'s description from its ``files`` (see the module doc)."""
    for path in (files.log_path, files.offset_index_path, files.time_index_path):
        if not path.is_file():
            raise SegmentCopyError(f"{path}: missing; segment not copied", path=str(path))
    try:
        summary = files.summary(full_scan=verify_crc, verify_crc=verify_crc)
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


__all__ = ["describe_segment"]
