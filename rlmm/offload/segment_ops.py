"""The two state walks of one remote segment: copy (STARTED -> upload -> FINISHED) and
delete (DELETE_STARTED -> RSM delete -> DELETE_FINISHED).

Invariants: only segments rlmm wrote are ever changed (``Ownership``): a delete of
any other raises ForeignSegmentError before an event is written; every copy gets a
signed segment id (``new_segment_id``). Metadata is published before objects exist
and after they are gone, so an object never exists without a live segment in the
metadata (except for the upload of a process killed before its cleanup, which the
next leader's crash cleanup deletes); a copy that fails or is cancelled after its
STARTED event deletes its attempt through the delete walk before the error
propagates; every RSM call runs in a worker thread, bounded by ``io_slots``. A walk
cancelled (leadership lost, a second signal) is abandoned, not failed: as Kafka's
RemoteLogManager counts no error for a cancelled task, it is not counted in the copy or
delete error metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remote import RemoteStorageManager
from rlmm.errors import RemoteStorageError
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.offload.blocking import finish, run_blocking, run_cancellable
from rlmm.offload.errors import ForeignSegmentError, SegmentCopyError
from rlmm.offload.faults import KillPoints
from rlmm.offload.log_source import SegmentDescription
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.ownership import Ownership, new_segment_id
from rlmm.offload_metadata import OffloadMetadataManager

log = logging.getLogger(__name__)

S = RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class OffloadEvent:
    """What a round did, for progress displays: ``kind`` is copied, deleted, failed,
    skipped (past retention already: not uploaded) or missed (``offsets`` deleted from
    the local log before they were copied); copy_started and copy_ended bracket every
    copy attempt, whatever its end (the time spent copying, for the rate)."""

    kind: str
    segment: RemoteLogSegmentMetadata | None
    size_in_bytes: int = 0
    error: str | None = None
    offsets: int = 0


@dataclass
class SegmentOps:
    """Copy and delete walks over one RLMM and one RSM (shared by all partitions)."""

    manager: OffloadMetadataManager
    rsm: RemoteStorageManager
    broker_id: int
    metrics: OffloadMetrics
    io_slots: asyncio.Semaphore
    ownership: Ownership
    kill_points: KillPoints = field(default_factory=KillPoints)
    listener: Callable[[OffloadEvent], None] | None = None
    clock_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    in_flight: set[RemoteLogSegmentId] = field(default_factory=set)

    def emit(self, event: OffloadEvent) -> None:
        if self.listener is not None:
            self.listener(event)

    async def _update(
        self, metadata: RemoteLogSegmentMetadata, state: S, custom: bytes | None
    ) -> None:
        await self.manager.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id, self.clock_ms(), custom, state, self.broker_id
            )
        )

    # ---- copy ---------------------------------------------------------------------------

    async def copy(
        self, tp: TopicIdPartition, desc: SegmentDescription
    ) -> RemoteLogSegmentMetadata:
        """One copy attempt of one segment under a fresh id; the FINISHED metadata."""
        metadata = RemoteLogSegmentMetadata(
            new_segment_id(tp),
            desc.base_offset,
            desc.end_offset,
            desc.max_timestamp_ms,
            self.broker_id,
            self.clock_ms(),
            desc.size_in_bytes,
            desc.segment_leader_epochs,
            txn_index_empty=desc.txn_index_empty,
        )
        topic = metadata.topic_id_partition.topic
        self.metrics.copy_requests.labels(topic).inc()
        paused_s = self.rsm.paused_for_s()
        if paused_s > 0:
            # Nothing written, nothing sent: an outage costs neither metadata nor bytes.
            self.metrics.copy_errors.labels(topic).inc()
            raise SegmentCopyError(
                f"copy of {desc.data.log_segment} not started: remote storage refused"
                f" requests, and the store holds copies for {paused_s:.1f} s more",
                path=str(desc.data.log_segment),
                retriable=True,
            )
        await self.manager.add_remote_log_segment_metadata(metadata)
        self.in_flight.add(metadata.remote_log_segment_id)
        self.emit(OffloadEvent("copy_started", metadata, desc.size_in_bytes))
        try:
            self.kill_points.hit("copy.after_started")
            self.kill_points.hit("copy.upload")
            custom = await run_cancellable(
                self.io_slots,
                lambda cancelled: self.rsm.copy_log_segment_data(
                    metadata, desc.data, cancelled=cancelled
                ),
            )
            self.kill_points.hit("copy.after_upload")
            await self._update(metadata, S.COPY_SEGMENT_FINISHED, custom)
            self.kill_points.hit("copy.after_finished")
        except BaseException as e:
            if not isinstance(e, asyncio.CancelledError):
                self.metrics.copy_errors.labels(topic).inc()
            # Whatever happened (RSM error, a new leader's cleanup, cancellation), the
            # attempt's objects must not outlive it.
            await finish(self._abandon(metadata))
            if isinstance(e, RemoteStorageError) and not isinstance(e, SegmentCopyError):
                raise SegmentCopyError(
                    f"copy of {desc.data.log_segment} as {metadata.remote_log_segment_id}"
                    f" failed: {e}",
                    path=str(desc.data.log_segment),
                    retriable=e.retriable,
                ) from e
            raise
        finally:
            self.in_flight.discard(metadata.remote_log_segment_id)
            self.emit(OffloadEvent("copy_ended", metadata, desc.size_in_bytes))
        self.metrics.copy_bytes.labels(topic).inc(desc.size_in_bytes)
        finished = metadata.create_with_updates(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id,
                self.clock_ms(),
                custom,
                S.COPY_SEGMENT_FINISHED,
                self.broker_id,
            )
        )
        self.emit(OffloadEvent("copied", finished, desc.size_in_bytes))
        return finished

    async def _abandon(self, metadata: RemoteLogSegmentMetadata) -> None:
        try:
            await self.delete(metadata)
        except RemoteStorageError as e:
            # The metadata may have moved on (a new leader's cleanup); the objects of
            # this attempt still go.
            log.warning("cleaning up the failed copy %s: %s", metadata.remote_log_segment_id, e)
            with contextlib.suppress(RemoteStorageError):
                await run_blocking(self.io_slots, self.rsm.delete_log_segment_data, metadata)

    # ---- delete -------------------------------------------------------------------------

    async def owns(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """True when rlmm wrote ``metadata``'s segment (a listing runs in a worker thread)."""
        if self.ownership.needs_listing(metadata):
            return await run_blocking(self.io_slots, self.ownership.owns, metadata)
        return self.ownership.owns(metadata)

    async def delete(self, metadata: RemoteLogSegmentMetadata) -> None:
        """DELETE_STARTED (unless it is already) -> RSM delete -> DELETE_FINISHED.

        ForeignSegmentError, with nothing written, for a segment rlmm did not write."""
        if not await self.owns(metadata):
            raise ForeignSegmentError(
                f"not deleting {metadata.remote_log_segment_id}"
                f" ({metadata.state.name}, broker {metadata.broker_id}): rlmm did not write it"
                " (no rlmm segment id, no object in rlmm's remote store)"
            )
        topic = metadata.topic_id_partition.topic
        self.metrics.delete_requests.labels(topic).inc()
        try:
            if metadata.state != S.DELETE_SEGMENT_STARTED:
                await self._update(metadata, S.DELETE_SEGMENT_STARTED, None)
                self.kill_points.hit("delete.after_started")
            self.kill_points.hit("delete.rsm")
            await run_blocking(self.io_slots, self.rsm.delete_log_segment_data, metadata)
            self.kill_points.hit("delete.after_delete")
            await self._update(metadata, S.DELETE_SEGMENT_FINISHED, None)
        except BaseException as e:
            if not isinstance(e, asyncio.CancelledError):
                self.metrics.delete_errors.labels(topic).inc()
            raise
        self.emit(OffloadEvent("deleted", metadata, metadata.segment_size_in_bytes))


__all__ = ["OffloadEvent", "SegmentOps"]
