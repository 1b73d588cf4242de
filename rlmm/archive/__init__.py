"""The archive reader: read-only metadata, slice planning and slice decoding into Arrow.

The one library layer under the Spark source (``rlmm.spark``) and the CLI's
``records`` and listing commands. Readers open their metadata through
``open_archive_view``: the metadata log, or after a disaster the remote store alone
(``from_store``, ``store_view``). Invariant: nothing here writes to the event log,
the snapshot store or remote storage (the one write is rlmm's own side index of
smallest timestamps, ``smallest_timestamps``, never a layout's objects); the metadata
view is the only part that reads the event log, and a slice's reader needs only the
slice (and remote storage). The Arrow parts are not imported here: ``read_slice``,
``read_slice_batches`` and ``decode_batches`` come from ``rlmm.archive.reader``,
``kafka_schema`` from ``rlmm.archive.columns``, so what only plans or lists (the
sidecar, ``segments``, ``verify``, ``gc``) never loads pyarrow: about 50 MiB of a
sidecar's memory and 0.2 s of every CLI start.
"""

from __future__ import annotations

from rlmm.archive.errors import (
    ArchiveError,
    CorruptBatchError,
    DataLossError,
    EmptyViewError,
    MetadataLogUnavailableError,
    StoreRemedyError,
)
from rlmm.archive.lineage import Gap, LineageRange
from rlmm.archive.packing import OPEN_COST_BYTES, pack_slices
from rlmm.archive.planner import plan_slices, select_partitions
from rlmm.archive.request import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ReadRequest,
    Slice,
)
from rlmm.archive.sources import (
    check_view_not_empty,
    open_archive_view,
    open_store_view,
    store_settings,
)
from rlmm.archive.storage import close_remote_storage, remote_storage_for
from rlmm.archive.store_view import StoreListing, list_store_segments, store_metadata_view
from rlmm.archive.view import (
    MetadataView,
    ViewStats,
    load_metadata_view,
    open_metadata_view,
    snapshot_source,
)
from rlmm.archive.where import RowBounds, comparison_bounds

__all__ = [
    "EARLIEST",
    "LATEST",
    "OPEN_COST_BYTES",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "ArchiveError",
    "CorruptBatchError",
    "DataLossError",
    "EmptyViewError",
    "Gap",
    "LineageRange",
    "MetadataLogUnavailableError",
    "MetadataView",
    "ReadRequest",
    "RowBounds",
    "Slice",
    "StoreListing",
    "StoreRemedyError",
    "ViewStats",
    "check_view_not_empty",
    "close_remote_storage",
    "comparison_bounds",
    "list_store_segments",
    "load_metadata_view",
    "open_archive_view",
    "open_metadata_view",
    "open_store_view",
    "pack_slices",
    "plan_slices",
    "remote_storage_for",
    "select_partitions",
    "snapshot_source",
    "store_metadata_view",
    "store_settings",
]
