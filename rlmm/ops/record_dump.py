"""Archived records of one topic, read straight from remote storage, as plain rows.

The library side of ``rlmm records``: a MetadataView (the metadata log's, or the
remote store's alone), the archive's planner and its slice reader (the same path as
the Spark source), turned into one dict per record with Kafka's field names.
Invariant: reads only; records come partition by partition in offset order, and at
most ``limit`` of them are decoded (slices are read lazily, so a small limit reads
little). A read that could only come back empty because of what was asked (a topic
not in the metadata, a start offset past the end of every chosen partition) is an
error naming what the archive holds.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rlmm.archive import (
    MetadataView,
    ReadRequest,
    close_remote_storage,
    open_archive_view,
    plan_slices,
)
from rlmm.config import RlmmConfig
from rlmm.errors import RemoteResourceNotFoundError
from rlmm.model import TopicIdPartition
from rlmm.ops.inventory import check_topic_known


@dataclass(frozen=True)
class RecordQuery:
    topic: str
    partitions: tuple[int, ...] = ()  # () = every partition of the topic
    from_offset: int | None = None  # None = the archive's first offset
    limit: int | None = None
    isolation_level: str = "read_uncommitted"


def _text_or_base64(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}


def record_fields(row: dict[str, Any]) -> dict[str, Any]:
    """One Arrow row as JSON-ready fields (key/value as text, or base64 if not UTF-8)."""
    ts = row["timestamp"]
    out: dict[str, Any] = {
        "topic": row["topic"],
        "partition": row["partition"],
        "offset": row["offset"],
        "timestamp_ms": None if ts is None else int(ts.timestamp() * 1000),
        "timestamp_type": row["timestampType"],
        **_text_or_base64("key", row["key"]),
        **_text_or_base64("value", row["value"]),
    }
    if row.get("headers") is not None:
        out["headers"] = [
            {"key": h["key"], **_text_or_base64("value", h["value"])} for h in row["headers"]
        ]
    return out


def read_records(
    config: RlmmConfig, query: RecordQuery, *, from_store: bool = False
) -> Iterator[dict[str, Any]]:
    """Arrow rows (``kafka_schema(True)`` field names) of the query's records; with
    ``from_store``, of the segments the remote store alone holds (no metadata log)."""
    view = open_archive_view(config, from_store=from_store, topics=[query.topic])
    with view:
        check_topic_known(view, query.topic)
        partitions = {tp.partition: tp for tp in view.topic_partitions() if tp.topic == query.topic}
        known = sorted(partitions)
        chosen = query.partitions or tuple(known)
        missing = sorted(set(chosen) - set(known))
        if missing:
            raise RemoteResourceNotFoundError(
                f"topic {query.topic!r} has no partition {missing} in remote storage"
                f" (it has {known})"
            )
        starting = None
        if query.from_offset is not None:
            chosen = _reaching(view, query.topic, partitions, chosen, query.from_offset)
            starting = {(query.topic, p): query.from_offset for p in chosen}
        request = ReadRequest(
            partitions={query.topic: chosen},
            starting_offsets=starting,
            isolation_level=query.isolation_level,
            include_headers=True,
        )
        slices = plan_slices(
            view,
            request,
            remote_options=config.remote_options(),
            side_index=config.side_index_location(),
        )
    from rlmm.archive.reader import read_slice  # pyarrow: only when records are read

    remaining = query.limit
    try:
        for piece in slices:
            for batch in read_slice(piece):
                for row in batch.to_pylist():
                    if remaining is not None and remaining <= 0:
                        return
                    yield row
                    if remaining is not None:
                        remaining -= 1
    finally:
        close_remote_storage()  # the reader's per-process RSM cache


def _reaching(
    view: MetadataView,
    topic: str,
    partitions: dict[int, TopicIdPartition],
    chosen: tuple[int, ...],
    from_offset: int,
) -> tuple[int, ...]:
    """The chosen partitions whose archive reaches ``from_offset``; an error naming each
    partition's archived offsets when none does (nothing to print is not a clean read)."""
    ranges = {p: view.lineage_ranges(partitions[p]) for p in chosen}
    reaching = tuple(p for p in chosen if ranges[p] and ranges[p][-1].last_offset >= from_offset)
    if reaching:
        return reaching
    held = ", ".join(
        f"{topic}-{p}: offsets {r[0].first_offset} to {r[-1].last_offset}"
        if r
        else f"{topic}-{p}: no finished segment"
        for p, r in ranges.items()
    )
    raise RemoteResourceNotFoundError(
        f"offset {from_offset} is past the end of the archive of {topic!r} ({held})"
    )


def raw_value(row: dict[str, Any]) -> bytes:
    value: bytes | None = row["value"]
    return b"" if value is None else value


__all__ = ["RecordQuery", "raw_value", "read_records", "record_fields"]
