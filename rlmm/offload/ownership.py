"""Ownership: which remote segments rlmm wrote, so that it changes nothing else.

A broker that tiers with Kafka's own RemoteLogManager, or another tool, may share the
metadata topic with the offloader. rlmm may change only what it wrote: it writes no
event for a segment it did not create, and deletes no object of one.

A segment is rlmm's when either
- its segment id carries rlmm's signature: the last 4 bytes of the 16 are a keyed
  BLAKE2b digest of the first 12 (``new_segment_id``). A random Kafka id carries it
  by chance once in 2**32. The signature is what lets a crash cleanup recognise a
  copy of ours left in COPY_SEGMENT_STARTED before any object was uploaded;
- or its objects are in rlmm's own layout in the configured remote store (a segment
  copied by a release before signatures; listed once per partition).

Invariant: ``owns`` never says True for a segment neither signed by rlmm nor holding
an object in its store; the listing it caches is per partition and only ever used to
say "ours" (an id missing from it is looked up again after ``forget``).
"""

from __future__ import annotations

import threading

from remote import RemoteStorageManager
from remote.naming import parse_object_name
from rlmm.model import (
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    is_rlmm_segment_id,
    kafka_uuid_to_str,
    new_rlmm_segment_id,
)

# The signature itself lives with the model (rlmm.model): gc and verify, below the
# offloader, recognise rlmm's segments too.
new_segment_id = new_rlmm_segment_id
is_signed = is_rlmm_segment_id


class Ownership:
    """Answers "did rlmm write this segment?" against one remote store (thread-safe)."""

    def __init__(self, rsm: RemoteStorageManager) -> None:
        self._rsm = rsm
        self._lock = threading.Lock()
        self._stored: dict[TopicIdPartition, frozenset[str]] = {}

    def owns(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """True when rlmm wrote ``metadata``'s segment. May list the partition's objects
        (blocking I/O, once per partition): call it from a worker thread."""
        segment_id = metadata.remote_log_segment_id
        if is_rlmm_segment_id(segment_id):
            return True
        return kafka_uuid_to_str(segment_id.id) in self._stored_ids(segment_id.topic_id_partition)

    def needs_listing(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """True when ``owns`` would list the store (an unsigned id, a partition not listed)."""
        segment_id = metadata.remote_log_segment_id
        with self._lock:
            listed = segment_id.topic_id_partition in self._stored
        return not listed and not is_rlmm_segment_id(segment_id)

    def forget(self, tp: TopicIdPartition) -> None:
        """Drop the cached listing of ``tp`` (the next unsigned id lists it again)."""
        with self._lock:
            self._stored.pop(tp, None)

    def _stored_ids(self, tp: TopicIdPartition) -> frozenset[str]:
        with self._lock:
            found = self._stored.get(tp)
        if found is not None:
            return found
        ids = set()
        for obj in self._rsm.list_objects(tp):
            name = parse_object_name(obj.name)
            if name is not None and not name.temporary:
                ids.add(name.segment_id)
        found = frozenset(ids)
        with self._lock:
            self._stored[tp] = found
        return found


__all__ = ["Ownership", "is_signed", "new_segment_id"]
