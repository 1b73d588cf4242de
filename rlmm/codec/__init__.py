"""Kafka's RemoteLogMetadataSerde: ``encode(event)`` and ``decode(data)``, byte for byte.

Invariant: this package imports nothing of the cache; its public surface is this
module's ``__all__`` (``serde``'s names and the fast-path flags) and the ``build``
module (trusted builders of model instances, which the cache shares). ``serde`` holds
the record layouts, ``_wire`` the flexible-version primitives.
"""

from __future__ import annotations

from rlmm.codec._wire import FAST_UUID, uuid_from_int
from rlmm.codec.build import FAST_BUILD
from rlmm.codec.serde import (
    FRAME_VERSION,
    HIGHEST_READ_VERSION,
    PARTITION_DELETE_METADATA_API_KEY,
    SEGMENT_METADATA_API_KEY,
    SEGMENT_METADATA_SNAPSHOT_API_KEY,
    SEGMENT_METADATA_UPDATE_API_KEY,
    WRITE_VERSION,
    decode,
    encode,
)

__all__ = [
    "FAST_BUILD",
    "FAST_UUID",
    "FRAME_VERSION",
    "HIGHEST_READ_VERSION",
    "PARTITION_DELETE_METADATA_API_KEY",
    "SEGMENT_METADATA_API_KEY",
    "SEGMENT_METADATA_SNAPSHOT_API_KEY",
    "SEGMENT_METADATA_UPDATE_API_KEY",
    "WRITE_VERSION",
    "decode",
    "encode",
    "uuid_from_int",
]
