"""The copies a stopped ``rlmm serve`` left half done, finished as Kafka would have.

Kafka's RemoteLogManager adds a segment as COPY_SEGMENT_STARTED, copies it, then marks
it COPY_SEGMENT_FINISHED; when the copy fails it deletes the segment's objects and marks
it DELETE_SEGMENT_STARTED, then DELETE_SEGMENT_FINISHED. When the copy failed because
``rlmm serve`` died under it (a SIGKILL, an OOM), that cleanup goes through the same
process and fails too unless a new one is ready within the bridge's wait. Kafka never
comes back to such a segment ("cleanup failed, will retry later" retries only
DELETE_SEGMENT_STARTED ones): it stays COPY_SEGMENT_STARTED, its objects stored and
never read, and ``rlmm verify`` reports it.

Invariant: once per process, ``GRACE_S`` after the manager started (Kafka's own cleanup
of a failed copy gets its chance first; later if Kafka has not yet handed this broker
its partitions, up to ``LEADERSHIP_WAITS`` times that), a segment is cleaned only if
all of these hold: this broker leads its partition, this broker added it (its broker id), it is
still COPY_SEGMENT_STARTED, and it was not added through this process (so its copy
began under a process that is gone) nor is a copy of it running here. Cleaning is
Kafka's own sequence (DELETE_SEGMENT_STARTED, the objects deleted, then
DELETE_SEGMENT_FINISHED); a step that fails is logged and left for ``rlmm gc``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from remote.storage import RemoteStorageManager
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.offload_metadata import OffloadMetadataManager

log = logging.getLogger(__name__)

# Kafka cleans a failed copy at once; a new serve waits this long before it looks.
GRACE_S = 10.0
# A broker that has not assigned its partitions by then is looked at again, each GRACE_S,
# this many times in all.
LEADERSHIP_WAITS = 6
_STARTED = frozenset({RemoteLogSegmentState.COPY_SEGMENT_STARTED})


def dangling(
    manager: OffloadMetadataManager,
    leaders: Iterable[TopicIdPartition],
    broker_id: int,
    ours: Callable[[uuid.UUID], bool],
) -> list[RemoteLogSegmentMetadata]:
    """The COPY_SEGMENT_STARTED segments of ``leaders`` this broker added whose copy is
    not this process's (``ours``: added or being copied here)."""
    found = []
    for tp in leaders:
        if not manager.is_ready(tp):
            continue
        for md in manager.walk_remote_log_segments(tp, _STARTED):
            if md.broker_id == broker_id and not ours(md.remote_log_segment_id.id):
                found.append(md)
    return found


async def clean(
    manager: OffloadMetadataManager,
    store: RemoteStorageManager,
    segments: Iterable[RemoteLogSegmentMetadata],
    broker_id: int,
) -> int:
    """Delete each segment's objects between Kafka's two delete events; how many were
    cleaned (a failure is logged and the rest go on)."""
    cleaned = 0
    for md in segments:
        segment = md.remote_log_segment_id
        try:
            await manager.update_remote_log_segment_metadata(
                _update(md, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, broker_id)
            )
            await asyncio.to_thread(store.delete_log_segment_data, md)
            await manager.update_remote_log_segment_metadata(
                _update(md, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, broker_id)
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning(
                "segment %s (offsets %d-%d) was left COPY_SEGMENT_STARTED by a stopped rlmm"
                " serve and could not be cleaned: %s; `rlmm gc --apply` removes it",
                segment,
                md.start_offset,
                md.end_offset,
                e,
            )
            continue
        cleaned += 1
        log.warning(
            "segment %s (offsets %d-%d) was left COPY_SEGMENT_STARTED by a stopped rlmm serve"
            " (its copy failed with the process, and so did Kafka's cleanup): its objects"
            " are deleted and it is DELETE_SEGMENT_FINISHED, as Kafka's cleanup would have",
            segment,
            md.start_offset,
            md.end_offset,
        )
    return cleaned


def _update(
    md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, broker_id: int
) -> RemoteLogSegmentMetadataUpdate:
    now = int(time.time() * 1000)
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, now, None, state, broker_id)


__all__ = ["GRACE_S", "LEADERSHIP_WAITS", "clean", "dangling"]
