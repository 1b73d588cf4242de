"""Kafka segment files: read a partition dir, iterate record batches, write test segments.

Job: everything that knows Kafka's on-disk log format (``.log`` record batches,
``.index``, ``.timeindex``, ``.txnindex``, producer snapshots, ``leader-epoch-checkpoint``,
``partition.metadata``). Invariant: bad bytes surface only as
:class:`remote.errors.SegmentFormatError` (naming file and byte position).
"""

from remote.segments.batch import RecordBatchHeader, RecordBatchReader, iter_batch_headers
from remote.segments.checkpoints import (
    EpochEntry,
    PartitionMetadata,
    ProducerStateEntry,
    encode_leader_epoch_checkpoint,
    encode_partition_metadata,
    encode_producer_snapshot,
    leader_epochs_in_range,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
    read_producer_snapshot,
)
from remote.segments.indexes import (
    AbortedTxn,
    OffsetIndexEntry,
    TimeIndexEntry,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
    last_offset_index_entry,
    lookup_offset,
    read_offset_index,
    read_time_index,
    read_txn_index,
)
from remote.segments.partition_dir import (
    LogSegmentFiles,
    LogSegmentSummary,
    PartitionDir,
    offset_file_name,
    parse_partition_dir_name,
)
from remote.segments.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    decode_batch,
    iter_records,
)
from remote.segments.writer import (
    CODECS,
    PartitionDirWriter,
    ProducerRecord,
    available_codecs,
    generate_records,
)

__all__ = [
    "CODECS",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "AbortedTxn",
    "EpochEntry",
    "LogSegmentFiles",
    "LogSegmentSummary",
    "OffsetIndexEntry",
    "PartitionDir",
    "PartitionDirWriter",
    "PartitionMetadata",
    "ProducerRecord",
    "ProducerStateEntry",
    "Record",
    "RecordBatchHeader",
    "RecordBatchReader",
    "TimeIndexEntry",
    "available_codecs",
    "decode_batch",
    "encode_leader_epoch_checkpoint",
    "encode_offset_index",
    "encode_partition_metadata",
    "encode_producer_snapshot",
    "encode_time_index",
    "encode_txn_index",
    "generate_records",
    "iter_batch_headers",
    "iter_records",
    "last_offset_index_entry",
    "leader_epochs_in_range",
    "lookup_offset",
    "offset_file_name",
    "parse_partition_dir_name",
    "read_leader_epoch_checkpoint",
    "read_offset_index",
    "read_partition_metadata",
    "read_producer_snapshot",
    "read_time_index",
    "read_txn_index",
]
