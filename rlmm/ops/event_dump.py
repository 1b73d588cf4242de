"""Decoded metadata events, from the configured event log or from raw log segment files.

The library side of ``rlmm events`` (and of the event history of ``rlmm segments
show``), after Kafka's DumpLogSegments: every record of the metadata topic becomes
one ``DumpedEvent``, either a decoded event or an error naming its offset (and file
position for a segment file).

Invariant: reading never writes and never takes the file log's writer lock; a record
that cannot be decoded, or a batch whose CRC-32C fails, becomes an error entry and
the dump goes on; only a file whose framing is broken ends early, with an error
entry naming the byte position. Errors of the event log come out as
rlmm.errors.RemoteStorageError naming the log; one that cannot be opened at all (gone
with a lost cluster) as rlmm.archive.MetadataLogUnavailableError.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventlog import EventLog, EventLogError
from remote.errors import SegmentFormatError
from remote.segments.batch import RecordBatchReader, parse_batch_header
from remote.segments.records import decode_batch
from rlmm.archive.errors import MetadataLogUnavailableError
from rlmm.archive.view import eventlog_source, open_read_only_event_log
from rlmm.codec import decode
from rlmm.config import RlmmConfig
from rlmm.errors import CodecError, ConfigError, RemoteStorageError
from rlmm.model import RemoteLogMetadata, RemoteLogSegmentId, TopicIdPartition
from rlmm.ops.describe import event_fields
from rlmm.partitioning import metadata_partition_for


@dataclass(frozen=True, slots=True)
class DumpedEvent:
    """One record of the metadata log: the event it holds, or why it could not be read."""

    metadata_partition: int | None
    offset: int | None
    event: RemoteLogMetadata | None = None
    error: str | None = None
    position: int | None = None  # byte position in a segment file

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metadata_partition": self.metadata_partition, "offset": self.offset}
        if self.position is not None:
            out["position"] = self.position
        if self.event is not None:
            out.update(event_fields(self.event))
        if self.error is not None:
            out["error"] = self.error
        return out


def _decoded(
    partition: int | None, offset: int, value: bytes | None, position: int | None = None
) -> DumpedEvent:
    if value is None:
        return DumpedEvent(partition, offset, error="record has no value", position=position)
    try:
        return DumpedEvent(partition, offset, decode(value), position=position)
    except CodecError as e:
        return DumpedEvent(partition, offset, error=f"cannot decode: {e}", position=position)


# --- raw segment files ---------------------------------------------------------------------

_PARTITION_DIR = re.compile(r".+-(\d+)")


def dump_segment_file(path: Path) -> Iterator[DumpedEvent]:
    """Every record of one metadata log segment file (Kafka's or the file event log's)."""
    match = _PARTITION_DIR.fullmatch(path.resolve().parent.name)
    partition = int(match.group(1)) if match else None
    if not path.is_file():
        raise RemoteStorageError(f"metadata log segment file {path} does not exist")
    name = str(path)
    reader = RecordBatchReader(path, name=name, strict=False, allow_truncated_tail=False)
    for header, data in reader.batches():
        try:
            parse_batch_header(data, 0, header.position, name, verify_crc=True)
            records = decode_batch(header, data, name=name)
        except SegmentFormatError as e:
            yield DumpedEvent(partition, header.base_offset, error=str(e), position=header.position)
            continue
        for record in records:
            if record.is_control:
                continue
            yield _decoded(partition, record.offset, record.value, header.position)
    if reader.error is not None:
        yield DumpedEvent(
            partition, None, error=f"dump stopped: {reader.error}", position=reader.valid_bytes
        )


# --- the configured event log --------------------------------------------------------------


def reading_event_log(config: RlmmConfig) -> EventLog:
    """The configured event log, opened so that reading it changes nothing;
    MetadataLogUnavailableError when the directory that holds it does not exist."""
    options = config.event_log_options()
    setting = config.event_log_backend().directory_option
    if setting is not None:
        directory = Path(options[setting])
        if not directory.is_dir():
            raise MetadataLogUnavailableError(
                f"event log directory {directory} does not exist ({eventlog_source(config)})"
            )
    return open_read_only_event_log(config)


async def _read_partition(
    log: EventLog, partition: int, start: int, end: int | None
) -> AsyncIterator[DumpedEvent]:
    if end is not None and start >= end:
        return
    batches = log.read_batches(partition, start)
    try:
        async for batch in batches:
            for offset, value in batch:
                if end is not None and offset >= end:
                    return
                yield _decoded(partition, offset, value)
                if end is not None and offset + 1 >= end:
                    return
    finally:
        await batches.aclose()  # type: ignore[attr-defined]


async def _dump(
    log: EventLog,
    partitions: Sequence[int],
    from_offset: int,
    follow: bool,
    emit: Callable[[DumpedEvent], None],
) -> int:
    count = 0
    ends = await log.end_offsets(partitions)
    for p in partitions:
        async for item in _read_partition(log, p, from_offset, ends[p]):
            emit(item)
            count += 1
    if not follow:
        return count

    async def follow_one(p: int) -> None:
        nonlocal count
        async for item in _read_partition(log, p, max(from_offset, ends[p]), None):
            emit(item)
            count += 1

    await asyncio.gather(*(follow_one(p) for p in partitions))
    return count


def dump_event_log(
    config: RlmmConfig,
    emit: Callable[[DumpedEvent], None],
    *,
    partitions: Sequence[int] | None = None,
    from_offset: int = 0,
    follow: bool = False,
    holding: TopicIdPartition | None = None,
) -> int:
    """Emit every event of ``partitions`` (all by default; or the one ``holding`` a user
    partition's events) from ``from_offset``, partition by partition up to the end offsets
    at start; with ``follow``, then new events as they come, until interrupted. Returns how
    many entries were emitted."""

    async def run() -> int:
        log = reading_event_log(config)
        try:
            try:
                await log.start()
            except EventLogError as e:
                raise MetadataLogUnavailableError(
                    f"cannot read the remote log metadata from {log!r}"
                    f" ({eventlog_source(config)}): {e}"
                ) from e
            if holding is not None:
                chosen = [metadata_partition_for(holding, log.partition_count)]
            elif partitions is None:
                chosen = list(range(log.partition_count))
            else:
                chosen = list(partitions)
            for p in chosen:
                if not 0 <= p < log.partition_count:
                    raise ConfigError(
                        f"metadata partition {p} out of range [0, {log.partition_count})"
                    )
            return await _dump(log, chosen, from_offset, follow, emit)
        except EventLogError as e:
            # the log's repr, not its options: those may hold a password
            raise RemoteStorageError(f"{log!r}: {e}") from e
        finally:
            await log.close()

    return asyncio.run(run())


def segment_history(config: RlmmConfig, segment_id: RemoteLogSegmentId) -> list[DumpedEvent]:
    """The events of the metadata log that name one segment, in log order."""
    found: list[DumpedEvent] = []

    def keep(item: DumpedEvent) -> None:
        sid = getattr(item.event, "remote_log_segment_id", None)
        if sid == segment_id:
            found.append(item)

    dump_event_log(config, keep, holding=segment_id.topic_id_partition)
    return found


__all__ = [
    "DumpedEvent",
    "dump_event_log",
    "dump_segment_file",
    "reading_event_log",
    "segment_history",
]
