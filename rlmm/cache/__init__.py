"""Kafka's RemoteLogMetadataCache and RemotePartitionMetadataStore, columnar.

Invariant: the store holds one cache per user partition, and a cache holds exactly the
effect of the events applied to it. This package imports the codec only through its
public surface, and the codec imports nothing of it. Modules: ``metadata_store`` (the
store, lazy restore), ``partition`` (one partition's cache), ``_state`` (per-epoch
state, and what a block decodes to), ``_block`` (a cache as one snapshot block),
``_columns`` (the packed segment records), ``_objects`` (model objects built from a
record without their constructors, and the probe that proves them equal),
``summary`` (a segment's facts for the offloader's rounds, read from its record).
"""

from __future__ import annotations

from rlmm.cache._block import BlockError
from rlmm.cache._columns import DEAD
from rlmm.cache._state import RemoteLogLeaderEpochState
from rlmm.cache.metadata_store import RemotePartitionMetadataStore, StoreState
from rlmm.cache.partition import RemoteLogMetadataCache, SegmentsView
from rlmm.cache.summary import SegmentSummary

__all__ = [
    "DEAD",
    "BlockError",
    "RemoteLogLeaderEpochState",
    "RemoteLogMetadataCache",
    "RemotePartitionMetadataStore",
    "SegmentSummary",
    "SegmentsView",
    "StoreState",
]
