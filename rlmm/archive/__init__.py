"""The archive reader: read-only metadata, slice planning and slice decoding into Arrow.

The one library layer under the Spark source (``rlmm.spark``) and the CLI's
``records`` and listing commands. Invariant: nothing here writes to the event log,
the snapshot store or remote storage; the metadata view is the only part that reads
the event log, and a slice's reader needs only the slice (and remote storage).
"""

from __future__ import annotations

from rlmm.archive.errors import ArchiveError, CorruptBatchError, DataLossError
from rlmm.archive.lineage import Gap, LineageRange
from rlmm.archive.view import (
    MetadataView,
    ViewStats,
    load_metadata_view,
    open_metadata_view,
    snapshot_source,
)

__all__ = [
    "ArchiveError",
    "CorruptBatchError",
    "DataLossError",
    "Gap",
    "LineageRange",
    "MetadataView",
    "ViewStats",
    "load_metadata_view",
    "open_metadata_view",
    "snapshot_source",
]
