"""The RemoteLogMetadataManager's calls, as ``rlmm serve`` answers them for the bridge.

The manager is rlmm's TopicBasedRemoteLogMetadataManager over the configured event
log (on a broker: Kafka's ``__remote_log_metadata`` on the broker's own cluster, in
Kafka's format, so the broker can move between Kafka's RLMM and this one) with rlmm's
snapshots, so a restarted broker is ready after the snapshot and the tail, not a replay
of the topic.

Invariant: the manager starts in the background after the first ``configure`` and
retries (with backoff, logged) until it starts or the process stops; until then every
lookup is a not-ready error and ``is_ready`` is false. The partitions Kafka assigned
are kept here and handed to the manager once it has started, so an assignment made
while it starts is never lost.

A copy that a stopped serve left COPY_SEGMENT_STARTED (its copy and Kafka's cleanup of
it both went to the dead process) is cleaned once, ``dangling_copies.GRACE_S`` after the
manager starts, as Kafka's cleanup would have.

Versions: a listing is answered with the partition's metadata position (its metadata
partition and the offset applied there), and a write with the position once applied;
``applied_offsets`` is what the server pushes to the bridge as it moves. The bridge
keeps a partition's listing while its metadata partition's offset holds (an idle broker
lists every partition twice each task interval), so every answer that can be kept
names the position it reflects, taken with no wait between it and the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from rlmm.codec import encode
from rlmm.config import RlmmConfig
from rlmm.errors import RemoteStorageNotReadyError
from rlmm.factory import create_manager, open_event_log
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from rlmm.offload_metadata import OffloadMetadataManager
from rlmm.plugin import dangling_copies
from rlmm.plugin.broker_settings import broker_config, unknown_props
from rlmm.plugin.metrics import ServeReadiness
from rlmm.plugin.protocol import (
    arg,
    metadata_arg,
    metadata_bytes,
    optional_arg,
    topic_id_partition,
    topic_id_partitions,
)
from rlmm.plugin.storage_calls import StorageCalls

log = logging.getLogger(__name__)

Handler = Callable[[Mapping[str, Any]], Awaitable[Any]]
Lookup = Callable[[Mapping[str, Any]], Any]
# [metadata partition, offset applied there]: a partition's metadata version (None: not
# assigned here, so not to be kept)
Position = list[int] | None
START_BACKOFF_S = (1.0, 30.0)
ENCODINGS_KEPT = 1 << 17  # segments' encoded metadata kept for listings (about 20 MiB)


class MetadataCalls:
    """The RLMM's side of one ``rlmm serve``: one manager, started on the first configure."""

    def __init__(
        self,
        config_path: Path | None,
        readiness: ServeReadiness,
        overrides: Mapping[str, Any] | None = None,
        storage: StorageCalls | None = None,
    ) -> None:
        self._config_path = config_path
        self._overrides = dict(overrides or {})
        self._readiness = readiness
        self._manager: OffloadMetadataManager | None = None
        self._starting: asyncio.Task[None] | None = None
        self._leaders: set[TopicIdPartition] = set()
        self._followers: set[TopicIdPartition] = set()
        self._closed = False
        self._encodings: dict[tuple[uuid.UUID, RemoteLogSegmentState], bytes] = {}
        self._storage = storage
        # COPY_SEGMENT_STARTED segments added through this process and not updated since:
        # their copies are this process's (see dangling_copies)
        self._added_here: set[uuid.UUID] = set()
        self._janitor: asyncio.Task[None] | None = None
        self._started = asyncio.Event()

    def handlers(self) -> dict[str, Handler]:
        return {
            "rlmm.add_remote_log_segment_metadata": self.add_remote_log_segment_metadata,
            "rlmm.update_remote_log_segment_metadata": self.update_remote_log_segment_metadata,
            "rlmm.put_remote_partition_delete_metadata": self.put_remote_partition_delete_metadata,
            "rlmm.on_partition_leadership_changes": self.on_partition_leadership_changes,
            "rlmm.on_stop_partitions": self.on_stop_partitions,
        }

    def lookups(self) -> dict[str, Lookup]:
        """The calls answered from the cache alone: plain functions, no I/O, no await (the
        server answers them inline: an idle broker asks isReady and listRemoteLogSegments
        of every partition each task interval)."""
        return {
            "rlmm.remote_log_segment_metadata": self.remote_log_segment_metadata,
            "rlmm.highest_offset_for_epoch": self.highest_offset_for_epoch,
            "rlmm.list_remote_log_segments": self.list_remote_log_segments,
            "rlmm.remote_log_size": self.remote_log_size,
            "rlmm.next_segment_with_txn_index": self.next_segment_with_txn_index,
            "rlmm.is_ready": self.is_ready,
        }

    @property
    def manager(self) -> OffloadMetadataManager | None:
        """The manager once it has started (None before)."""
        return self._manager

    async def configure(self, props: Mapping[str, str]) -> None:
        if self._starting is not None:
            return  # a restarted bridge configures again; the manager already runs
        config = broker_config(self._config_path, props, overrides=self._overrides)
        ignored = unknown_props(props)
        if ignored:
            log.info("rlmm.config.* properties rlmm does not use: %s", ignored)
        self._readiness.waiting("manager", "the remote log metadata manager is starting")
        self._starting = asyncio.create_task(self._start(config), name="rlmm-serve-manager")

    async def _start(self, config: RlmmConfig) -> None:
        delay, most = START_BACKOFF_S
        while not self._closed:
            manager: OffloadMetadataManager | None = None
            try:
                started = manager = create_manager(config, open_event_log(config))
                await started.start()
            except asyncio.CancelledError:
                if manager is not None:
                    await manager.close()
                raise
            except Exception as e:
                if manager is not None:
                    await manager.close()
                reason = f"the remote log metadata manager could not start: {e}"
                log.warning("%s; retrying in %.0f s", reason, delay)
                self._readiness.waiting("manager", reason)
                await asyncio.sleep(delay)
                delay = min(delay * 2, most)
                continue
            self._manager = manager
            self._started.set()
            log.info("remote log metadata manager started over %r", config.eventlog.get("type"))
            if self._leaders or self._followers:
                await manager.on_partition_leadership_changes(
                    set(self._leaders), set(self._followers)
                )
            self._readiness.ready("manager")
            if self._storage is not None:
                self._janitor = asyncio.create_task(
                    self._clean_dangling(config.broker_id), name="rlmm-serve-dangling-copies"
                )
            return

    async def _clean_dangling(self, broker_id: int) -> None:
        """Once, GRACE_S after the manager started: the copies a stopped serve left
        COPY_SEGMENT_STARTED in the partitions this broker leads (dangling_copies)."""
        for _ in range(dangling_copies.LEADERSHIP_WAITS):
            await asyncio.sleep(dangling_copies.GRACE_S)
            if self._leaders:
                break  # else Kafka has not handed this broker its partitions yet
        manager, storage = self._manager, self._storage
        if manager is None or storage is None or storage.store is None or self._closed:
            return
        found = dangling_copies.dangling(
            manager,
            set(self._leaders),
            broker_id,
            lambda segment: segment in self._added_here or storage.copying(segment),
        )
        if found:
            await dangling_copies.clean(manager, storage.store, found, broker_id)

    def _ready_manager(self) -> OffloadMetadataManager:
        if self._manager is None:
            raise RemoteStorageNotReadyError(
                message="rlmm serve: the remote log metadata manager is not started yet"
            )
        return self._manager

    # --- writes (Kafka waits on the returned future) ------------------------------------

    # Each answers the partition's metadata position once the event is applied (a
    # listing the bridge kept from before it is then stale, before Kafka sees the write
    # done).

    async def add_remote_log_segment_metadata(self, args: Mapping[str, Any]) -> Position:
        metadata = metadata_arg(args, "metadata", RemoteLogSegmentMetadata)
        manager = self._ready_manager()
        segment = metadata.remote_log_segment_id.id
        self._added_here.add(segment)
        try:
            await manager.add_remote_log_segment_metadata(metadata)
        except BaseException:
            self._added_here.discard(segment)  # nothing was added to clean or keep
            raise
        return _position(manager, metadata.topic_id_partition)

    async def update_remote_log_segment_metadata(self, args: Mapping[str, Any]) -> Position:
        update = metadata_arg(args, "metadata", RemoteLogSegmentMetadataUpdate)
        manager = self._ready_manager()
        await manager.update_remote_log_segment_metadata(update)
        self._added_here.discard(update.remote_log_segment_id.id)
        return _position(manager, update.topic_id_partition)

    async def put_remote_partition_delete_metadata(self, args: Mapping[str, Any]) -> Position:
        metadata = metadata_arg(args, "metadata", RemotePartitionDeleteMetadata)
        manager = self._ready_manager()
        await manager.put_remote_partition_delete_metadata(metadata)
        return _position(manager, metadata.topic_id_partition)

    # --- lookups (the cache, no I/O) ------------------------------------------------------

    def remote_log_segment_metadata(self, args: Mapping[str, Any]) -> bytes | None:
        tp = topic_id_partition(args.get("topic_id_partition"))
        found = self._ready_manager().remote_log_segment_metadata(
            tp, arg(args, "epoch", int), arg(args, "offset", int)
        )
        return metadata_bytes(found)

    def highest_offset_for_epoch(self, args: Mapping[str, Any]) -> int | None:
        tp = topic_id_partition(args.get("topic_id_partition"))
        return self._ready_manager().highest_offset_for_epoch(tp, arg(args, "leader_epoch", int))

    def list_remote_log_segments(self, args: Mapping[str, Any]) -> dict[str, Any]:
        tp = topic_id_partition(args.get("topic_id_partition"))
        epoch = optional_arg(args, "leader_epoch", int)
        manager = self._ready_manager()
        found = manager.list_remote_log_segments(tp, epoch)
        # the same turn of the loop as the listing: nothing applied in between
        return {"segments": [self._encoded(m) for m in found], "version": _position(manager, tp)}

    def _encoded(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """Kafka's serde bytes of a segment's metadata, encoded once per segment and
        state: a segment reaches each state once (its transitions only go forward), and
        what it holds in a state does not change, so (id, state) names its bytes. An
        idle broker lists every partition's segments each task interval."""
        key = (metadata.remote_log_segment_id.id, metadata.state)
        data = self._encodings.get(key)
        if data is None:
            if len(self._encodings) >= ENCODINGS_KEPT:
                self._encodings.clear()
            data = self._encodings[key] = encode(metadata)
        return data

    def remote_log_size(self, args: Mapping[str, Any]) -> int:
        tp = topic_id_partition(args.get("topic_id_partition"))
        return self._ready_manager().remote_log_size(tp, arg(args, "leader_epoch", int))

    def next_segment_with_txn_index(self, args: Mapping[str, Any]) -> bytes | None:
        tp = topic_id_partition(args.get("topic_id_partition"))
        found = self._ready_manager().next_segment_with_txn_index(
            tp, arg(args, "epoch", int), arg(args, "offset", int)
        )
        return metadata_bytes(found)

    def applied_offsets(self) -> dict[int, int]:
        """Metadata partition -> the offset applied there (empty before the manager)."""
        return {} if self._manager is None else self._manager.applied_offsets

    async def applied_moved(self) -> None:
        """Return once the manager has started and applied something since the call
        (with the manager started, the wait begins before the call first yields)."""
        await self._started.wait()
        assert self._manager is not None
        await self._manager.applied_moved()

    def is_ready(self, args: Mapping[str, Any]) -> bool:
        tp = topic_id_partition(args.get("topic_id_partition"))
        return self._manager is not None and self._manager.is_ready(tp)

    # --- assignment -----------------------------------------------------------------------

    async def on_partition_leadership_changes(self, args: Mapping[str, Any]) -> None:
        leaders = set(topic_id_partitions(args, "leaders"))
        followers = set(topic_id_partitions(args, "followers"))
        self._leaders = (self._leaders - followers) | leaders
        self._followers = (self._followers - leaders) | followers
        if self._manager is not None:
            await self._manager.on_partition_leadership_changes(leaders, followers)

    async def on_stop_partitions(self, args: Mapping[str, Any]) -> None:
        partitions = set(topic_id_partitions(args, "partitions"))
        self._leaders -= partitions
        self._followers -= partitions
        if self._manager is not None:
            await self._manager.on_stop_partitions(partitions)

    async def close(self) -> None:
        """Stop starting, close the manager (its final snapshot). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in (self._starting, self._janitor):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._manager is not None:
            await self._manager.close()


def _position(manager: OffloadMetadataManager, tp: TopicIdPartition) -> Position:
    found = manager.metadata_position_of(tp)
    return None if found is None else [found[0], found[1]]


__all__ = ["MetadataCalls"]
