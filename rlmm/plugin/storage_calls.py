"""The RemoteStorageManager's calls, as ``rlmm serve`` answers them for the bridge.

Kafka's RemoteLogManager hands ``copyLogSegmentData`` the paths of a rolled segment's
files on the broker's disk (this process runs beside the broker, so it reads them
there) and the leader-epoch checkpoint's bytes; the copy goes through the configured
rlmm store (its layout, CRC-32C manifest and write-once checks), and the manifest
comes back as the segment's custom metadata, which Kafka stores in the
COPY_SEGMENT_FINISHED event. Fetches are ranged: the bridge asks for one chunk at a
time as Kafka's reader consumes the stream. When the bridge says it can read files
(``file``) and the store keeps the segment's log as a plain file on this host (the
local store), the first fetch is answered with that file's path and size instead, and
the bridge reads the range itself (no bytes through the socket, and the next reads of
that segment do not ask again); it reports each read and its bytes (``rsm.fetched``),
so the fetch metrics count them too.

Invariant: the store's blocking calls run on this side's thread pool, never on the
event loop; a call before ``configure`` is a not-ready error; a chunk never holds
more than the ``length`` asked nor reads past the segment's end.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from remote.storage import IndexType, LogSegmentData, RemoteStorageManager
from rlmm.errors import RemoteStorageNotReadyError
from rlmm.factory import open_remote_storage
from rlmm.model import RemoteLogSegmentMetadata
from rlmm.plugin.broker_settings import broker_config
from rlmm.plugin.errors import ProtocolError
from rlmm.plugin.metrics import PluginMetrics
from rlmm.plugin.protocol import arg, metadata_arg, optional_arg

log = logging.getLogger(__name__)
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Kafka's copier, expiration and reader pools default to 10 threads each.
THREADS = 32
MAX_CHUNK_BYTES = 16 << 20

Handler = Callable[[Mapping[str, Any]], Awaitable[Any]]


class StorageCalls:
    """The RSM's side of one ``rlmm serve``: one store, opened on the first configure."""

    def __init__(
        self,
        config_path: Path | None,
        metrics: PluginMetrics,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self._config_path = config_path
        self._overrides = dict(overrides or {})
        self._metrics = metrics
        self._store: RemoteStorageManager | None = None
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="rlmm-serve-rsm")
        self._closed = False
        self._copying: set[uuid.UUID] = set()

    def handlers(self) -> dict[str, Handler]:
        return {
            "rsm.copy_log_segment_data": self.copy_log_segment_data,
            "rsm.fetch_log_segment": self.fetch_log_segment,
            "rsm.fetch_index": self.fetch_index,
            "rsm.fetched": self.fetched,
            "rsm.delete_log_segment_data": self.delete_log_segment_data,
        }

    @property
    def store(self) -> RemoteStorageManager | None:
        return self._store

    def copying(self, segment: uuid.UUID) -> bool:
        """Whether a copy of this segment id runs in this process now."""
        return segment in self._copying

    async def configure(self, props: Mapping[str, str]) -> None:
        if self._store is not None:
            return  # a restarted bridge configures again: same file, same store
        config = broker_config(self._config_path, props, overrides=self._overrides)
        self._store = await self._run(open_remote_storage, config)
        log.info("remote storage: %r", self._store)

    def _ready_store(self) -> RemoteStorageManager:
        if self._store is None:
            raise RemoteStorageNotReadyError(
                message="rlmm serve: the RemoteStorageManager is not configured yet"
            )
        return self._store

    async def _run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # --- calls ---------------------------------------------------------------------------

    async def copy_log_segment_data(self, args: Mapping[str, Any]) -> dict[str, Any]:
        store = self._ready_store()
        metadata = metadata_arg(args, "metadata", RemoteLogSegmentMetadata)
        txn = optional_arg(args, "transaction_index", str)
        data = LogSegmentData(
            log_segment=Path(arg(args, "log_segment", str)),
            offset_index=Path(arg(args, "offset_index", str)),
            time_index=Path(arg(args, "time_index", str)),
            transaction_index=None if txn is None else Path(txn),
            producer_snapshot_index=Path(arg(args, "producer_snapshot_index", str)),
            leader_epoch_index=arg(args, "leader_epoch_index", bytes),
        )
        topic = metadata.topic_id_partition.topic
        started = time.monotonic()
        segment = metadata.remote_log_segment_id.id
        self._copying.add(segment)
        try:
            custom = await self._run(store.copy_log_segment_data, metadata, data)
        except BaseException:
            self._metrics.copy_errors.labels(topic).inc()
            raise
        finally:
            self._copying.discard(segment)
        self._metrics.copied(topic, metadata.segment_size_in_bytes, time.monotonic() - started)
        log.info(
            "copied %s offsets %d-%d (%d bytes)",
            metadata.remote_log_segment_id,
            metadata.start_offset,
            metadata.end_offset,
            metadata.segment_size_in_bytes,
        )
        return {"custom_metadata": custom}

    async def fetch_log_segment(self, args: Mapping[str, Any]) -> bytes | dict[str, Any]:
        store = self._ready_store()
        metadata = metadata_arg(args, "metadata", RemoteLogSegmentMetadata)
        position, length = arg(args, "position", int), arg(args, "length", int)
        if position < 0 or length <= 0 or length > MAX_CHUNK_BYTES:
            raise ProtocolError(
                f"rsm.fetch_log_segment of {metadata.remote_log_segment_id}: position"
                f" {position}, length {length} (at most {MAX_CHUNK_BYTES})"
            )
        if args.get("file") is True:
            located = await self._run(_segment_file, store, metadata)
            if located is not None:
                return located  # counted when the bridge reports the read (rsm.fetched)
        size = metadata.segment_size_in_bytes
        if position >= size:
            return b""
        end = min(position + length, size) - 1
        topic = metadata.topic_id_partition.topic
        try:
            chunk: bytes = await self._run(_read_range, store, metadata, position, end)
        except BaseException:
            self._metrics.fetch_errors.labels(topic).inc()
            raise
        self._metrics.fetched(topic, len(chunk))
        return chunk

    async def fetched(self, args: Mapping[str, Any]) -> None:
        """The bridge read ``bytes`` of ``topic``'s segment file itself: one read."""
        nbytes = arg(args, "bytes", int)
        if nbytes < 0:
            raise ProtocolError(f"rsm.fetched: bytes {nbytes} is negative")
        self._metrics.fetched(arg(args, "topic", str), nbytes)

    async def fetch_index(self, args: Mapping[str, Any]) -> bytes:
        store = self._ready_store()
        metadata = metadata_arg(args, "metadata", RemoteLogSegmentMetadata)
        name = arg(args, "index_type", str)
        try:
            kind = IndexType[name]
        except KeyError as e:
            raise ProtocolError(f"unknown index type {name!r}") from e
        data: bytes = await self._run(store.fetch_index, metadata, kind)
        return data

    async def delete_log_segment_data(self, args: Mapping[str, Any]) -> None:
        store = self._ready_store()
        metadata = metadata_arg(args, "metadata", RemoteLogSegmentMetadata)
        topic = metadata.topic_id_partition.topic
        self._metrics.delete_requests.labels(topic).inc()
        try:
            await self._run(store.delete_log_segment_data, metadata)
        except BaseException:
            self._metrics.delete_errors.labels(topic).inc()
            raise
        log.info("deleted %s", metadata.remote_log_segment_id)

    def close(self) -> None:
        """Close the store and the pool (after the calls in flight). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._store is not None:
            self._store.close()


def _segment_file(
    store: RemoteStorageManager, metadata: RemoteLogSegmentMetadata
) -> dict[str, Any] | None:
    path = store.log_segment_file(metadata)
    return None if path is None else {"path": str(path), "size": path.stat().st_size}


def _read_range(
    store: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int, end: int
) -> bytes:
    want = end - start + 1
    parts: list[bytes] = []
    with store.fetch_log_segment(metadata, start, end) as stream:
        while want > 0 and (part := stream.read(want)):
            parts.append(part)
            want -= len(part)
    return b"".join(parts)


__all__ = ["StorageCalls"]
