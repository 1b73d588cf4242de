"""SideIndex: segment id -> smallest record timestamp, kept where rlmm owns the storage.

Kafka records no segment's smallest timestamp. rlmm's own copies carry it in their
manifest (``remote.manifest``); for copies rlmm did not write (Kafka's
LocalTieredStorage, Aiven's S3 plugin) or wrote before manifest version 2, readers
learn it and record it here, never in the foreign layout's directory or bucket.

A reader sees a byte range of a segment (a slice: large segments are read as several),
so an entry is the smallest timestamp of the records of one byte range; a segment's
smallest timestamp is known once its entries cover all of its bytes. Layout: one empty
entry per range whose *name* holds the value, under the partition's directory as rlmm
names it::

    <root>/<topic>-<topic id>/<partition>/<segment uuid>.<start>.<end>.<smallest ms>.<crc32c>

(the uuid in 32 hex digits, ``[start, end)`` in bytes, the CRC-32C of the rest of the
name in 8). ``root`` is a local directory or ``s3://bucket/prefix``. So a planner reads
every entry of a partition with one listing (one ``scandir``; one ``ListObjectsV2``
page per 1,000 entries) and no GET, and a reader records one with one create (a file
created exclusively; a PUT with ``If-None-Match``). Entries are written once: a
segment id is one copy of one segment, so the smallest timestamp of a range of it
never changes.

Invariant: a listing is parsed within bounds (at most ``MAX_ENTRIES`` names per
partition, each matched by a fixed-width pattern, every number an int64, the name's
CRC-32C checked); a name that does not parse, or one range of a segment with two
different values, leaves that segment unknown (with a warning), never a wrong value.
A location that cannot be read or written raises SideIndexError, which callers log
and read on without.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c

from remote.errors import RemoteObjectExistsError, RemoteStorageError, SideIndexError
from remote.naming import partition_prefix
from rlmm.model import TopicIdPartition

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from remote._s3_client import S3Calls

log = logging.getLogger(__name__)

MAX_ENTRIES = 1_000_000  # per partition: ~100 bytes a name, a listing of at most ~100 MB
_NUMBER = r"(0|[1-9][0-9]{0,18})"
_ENTRY = re.compile(
    rf"([0-9a-f]{{32}})\.{_NUMBER}\.{_NUMBER}\.(-1|{_NUMBER[1:-1]})\.([0-9a-f]{{8}})"
)
_MAX_NAME = 32 + 3 * 20 + 4 + 8
_S3 = "s3://"


@dataclass(frozen=True, slots=True)
class Entry:
    """The smallest record timestamp of the records in bytes ``[start, end)``."""

    start: int
    end: int
    smallest_ms: int


def entry_name(segment_id: uuid.UUID, entry: Entry) -> str:
    body = f"{segment_id.hex}.{entry.start}.{entry.end}.{entry.smallest_ms}"
    return f"{body}.{crc32c.crc32c(body.encode()):08x}"


def parse_entries(names: Iterable[str], where: str) -> dict[uuid.UUID, list[Entry]]:
    """The entries of each segment in the names of one partition's directory."""
    found: dict[uuid.UUID, dict[tuple[int, int], int]] = {}
    bad: set[uuid.UUID] = set()
    for count, name in enumerate(names):
        if count >= MAX_ENTRIES:
            log.warning("%s: more than %d side index entries; the rest unread", where, count)
            break
        m = _ENTRY.fullmatch(name) if len(name) <= _MAX_NAME else None
        if m is None or f"{crc32c.crc32c(name[: m.end(4)].encode()):08x}" != m.group(5):
            log.warning("%s: side index entry %r is corrupt; ignored", where, name[:_MAX_NAME])
            if m is not None:
                bad.add(uuid.UUID(hex=m.group(1)))  # a damaged entry of a known segment
            continue
        segment_id = uuid.UUID(hex=m.group(1))
        start, end, smallest = int(m.group(2)), int(m.group(3)), int(m.group(4))
        if max(start, end, smallest) >= 2**63 or start >= end:
            log.warning("%s: side index entry %r is out of range; ignored", where, name)
            bad.add(segment_id)
            continue
        ranges = found.setdefault(segment_id, {})
        if ranges.setdefault((start, end), smallest) != smallest:
            log.warning(
                "%s: side index holds two smallest timestamps for bytes [%d, %d) of"
                " segment %s; the segment is unknown",
                where,
                start,
                end,
                segment_id,
            )
            bad.add(segment_id)
    return {
        segment_id: [Entry(s, e, v) for (s, e), v in sorted(ranges.items())]
        for segment_id, ranges in found.items()
        if segment_id not in bad
    }


def smallest_of(entries: Iterable[Entry], size: int) -> int | None:
    """The smallest timestamp of a segment of ``size`` bytes, when ``entries`` cover
    every byte of it; None when they leave a gap (a range no whole read saw yet)."""
    covered = 0
    smallest: int | None = None
    for entry in sorted(entries, key=lambda e: e.start):
        if entry.start > covered:
            return None
        covered = max(covered, entry.end)
        smallest = entry.smallest_ms if smallest is None else min(smallest, entry.smallest_ms)
    return smallest if covered >= size else None


class SideIndex:
    """The entries under one location (a directory or ``s3://bucket/prefix``)."""

    def __init__(self, location: str, *, s3_client: S3Client | None = None) -> None:
        self.location = location
        self._calls: S3Calls | None = None
        if location.startswith(_S3):
            bucket, _, prefix = location[len(_S3) :].partition("/")
            if not bucket or s3_client is None:
                raise SideIndexError(f"side index {location!r}: needs a bucket and an S3 client")
            from remote._s3_client import S3Calls  # boto3 only for an S3 location

            self._calls = S3Calls(s3_client, bucket)
            self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        else:
            self._root = Path(location)

    def __repr__(self) -> str:
        return f"SideIndex({self.location!r})"

    def _dir(self, tp: TopicIdPartition) -> str:
        return partition_prefix(tp)  # checks the topic name: no escape from the root

    def read(self, tp: TopicIdPartition) -> dict[uuid.UUID, list[Entry]]:
        """Every entry of ``tp`` (one listing); SideIndexError when it cannot be listed."""
        where = f"{self.location} {tp.topic}-{tp.partition}"
        if self._calls is not None:
            prefix = self._prefix + self._dir(tp)
            keys = (str(o.get("Key", ""))[len(prefix) :] for o in self._calls.list_objects(prefix))
            try:
                return parse_entries(keys, where)  # pages fetched as the parse goes
            except RemoteStorageError as e:
                raise SideIndexError(f"side index {where}: cannot list: {e}") from e
        directory = self._root / self._dir(tp)
        try:
            with os.scandir(directory) as entries:
                return parse_entries((e.name for e in entries), where)
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise SideIndexError(f"side index {where}: cannot list: {e}") from e

    def write(self, tp: TopicIdPartition, segment_id: uuid.UUID, entry: Entry) -> None:
        """Record one entry (an existing one is left as it is); SideIndexError on failure."""
        if not (-1 <= entry.smallest_ms < 2**63 and 0 <= entry.start < entry.end < 2**63):
            raise ValueError(f"{entry} is not a byte range and an int64 timestamp >= -1")
        name = self._dir(tp) + entry_name(segment_id, entry)
        if self._calls is not None:
            try:
                self._calls.call("put_object", self._prefix + name, Body=b"", IfNoneMatch="*")
            except RemoteObjectExistsError:
                return  # written before (by another executor): the same value
            except RemoteStorageError as e:
                raise SideIndexError(f"side index {self.location}: cannot write {name}: {e}") from e
            return
        path = self._root / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return
        except OSError as e:
            raise SideIndexError(f"side index {self.location}: cannot write {name}: {e}") from e

    def close(self) -> None:
        if self._calls is not None:
            self._calls.client.close()


def is_s3_location(location: str) -> bool:
    return location.startswith(_S3)


__all__ = [
    "MAX_ENTRIES",
    "Entry",
    "SideIndex",
    "SideIndexError",
    "entry_name",
    "is_s3_location",
    "parse_entries",
    "smallest_of",
]
