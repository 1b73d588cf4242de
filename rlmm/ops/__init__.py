"""The operator's library: inventories, verification, repair and dumps of remote storage.

What the ``rlmm`` CLI computes lives here (the CLI only parses and renders). Each
module reads through the archive's read-only MetadataView and a RemoteLayout; only
``repair`` writes, and only what ``verification`` proved is garbage.

Invariant: ``rlmm.ops`` sits above the core and the archive and below the users
(``rlmm.cli``); nothing of the core imports it.
"""

from __future__ import annotations

from rlmm.ops.describe import custom_metadata_text, event_fields, partition_fields, segment_fields
from rlmm.ops.event_dump import (
    DumpedEvent,
    dump_event_log,
    dump_segment_file,
    reading_event_log,
    segment_history,
)
from rlmm.ops.inventory import (
    PartitionSummary,
    SegmentDetail,
    SegmentFilter,
    StoredObject,
    describe_segment,
    find_segment,
    list_segments,
    summarize_partitions,
)
from rlmm.ops.record_dump import RecordQuery, read_records
from rlmm.ops.repair import RepairAction, RepairPlan, apply_repairs, plan_repairs
from rlmm.ops.snapshot_report import SnapshotReport, inspect_snapshot, inspect_snapshots
from rlmm.ops.verification import GARBAGE, Problem, ProblemKind, VerifyReport, verify

__all__ = [
    "GARBAGE",
    "DumpedEvent",
    "PartitionSummary",
    "Problem",
    "ProblemKind",
    "RecordQuery",
    "RepairAction",
    "RepairPlan",
    "SegmentDetail",
    "SegmentFilter",
    "SnapshotReport",
    "StoredObject",
    "VerifyReport",
    "apply_repairs",
    "custom_metadata_text",
    "describe_segment",
    "dump_event_log",
    "dump_segment_file",
    "event_fields",
    "find_segment",
    "inspect_snapshot",
    "inspect_snapshots",
    "list_segments",
    "partition_fields",
    "plan_repairs",
    "read_records",
    "reading_event_log",
    "segment_fields",
    "segment_history",
    "summarize_partitions",
    "verify",
]
