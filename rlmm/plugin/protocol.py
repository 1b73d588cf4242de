"""The bridge's wire protocol: length-prefixed msgpack frames over a local socket.

A frame is a 4-byte big-endian length and one msgpack map. The bridge sends requests
``{"id", "method", "args"}``; ``rlmm serve`` answers each with ``{"id", "result"}`` or
``{"id", "error": {"type", "message"}}``, in any order (many calls are in flight:
Kafka calls from its copier, expiration, follower and reader pools at once).
Segment metadata travels as Kafka's own ``RemoteLogMetadataSerde`` bytes (what
``__remote_log_metadata`` holds), so neither side maps its fields; a partition travels
as ``{"topic_id": 16 bytes, "topic", "partition"}``.

Invariant: a frame over ``MAX_FRAME_BYTES``, a frame that is not a map, or a value of
the wrong type is a ProtocolError naming the field; an error answer's ``type`` is one
of ``ERROR_TYPES`` (the bridge maps ``not_found`` to Kafka's
RemoteResourceNotFoundException and every other to RemoteStorageException).
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

import msgpack

from rlmm.codec import decode, encode
from rlmm.errors import (
    CodecError,
    ConfigError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    RemoteStorageTimeoutError,
)
from rlmm.model import RemoteLogMetadata, TopicIdPartition
from rlmm.plugin.errors import ProtocolError, VersionMismatchError

_Event = TypeVar("_Event", bound=RemoteLogMetadata)

PROTOCOL_VERSION = 2
MAX_FRAME_BYTES = 64 << 20
_LENGTH = struct.Struct(">I")
ERROR_TYPES = (
    "not_found",
    "not_ready",
    "timeout",
    "config",
    "codec",
    "protocol",
    "version_mismatch",
    "storage",
    "internal",
)


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next frame's map, or None when the peer closed the socket between frames."""
    try:
        head = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ProtocolError(f"the socket closed inside a frame header ({e.partial!r})") from e
        return None
    (size,) = _LENGTH.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"a frame of {size} bytes, more than {MAX_FRAME_BYTES}")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError as e:
        raise ProtocolError(
            f"the socket closed {len(e.partial)} bytes into a frame of {size}"
        ) from e
    try:
        message = msgpack.unpackb(body, raw=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise ProtocolError(f"a frame of {size} bytes that is not msgpack: {e}") from e
    if not isinstance(message, dict):
        raise ProtocolError(f"a frame holding a {type(message).__name__}, not a map")
    return message


def frame(message: Mapping[str, Any]) -> bytes:
    """``message`` as one frame."""
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"an answer of {len(body)} bytes, more than {MAX_FRAME_BYTES}")
    return _LENGTH.pack(len(body)) + body


def error_type(error: BaseException) -> str:
    """The wire type of ``error`` (the bridge picks Kafka's exception by it)."""
    kinds: tuple[tuple[type[BaseException], str], ...] = (
        (RemoteResourceNotFoundError, "not_found"),
        (RemoteStorageNotReadyError, "not_ready"),
        (RemoteStorageTimeoutError, "timeout"),
        (VersionMismatchError, "version_mismatch"),
        (ProtocolError, "protocol"),
        (ConfigError, "config"),
        (CodecError, "codec"),
        (RemoteStorageError, "storage"),
    )
    for kind, name in kinds:
        if isinstance(error, kind):
            return name
    return "internal"


# --- values ---------------------------------------------------------------------------


def arg(args: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``args[name]``, checked to be a ``kind``; ProtocolError naming it otherwise."""
    if name not in args:
        raise ProtocolError(f"argument {name!r} is missing")
    value = args[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ProtocolError(f"argument {name!r} is a {type(value).__name__}")
    return value


def optional_arg(args: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``args[name]`` or None when absent or nil."""
    return None if args.get(name) is None else arg(args, name, kind)


def topic_id_partition(value: object, name: str = "topic_id_partition") -> TopicIdPartition:
    """A partition from its wire map."""
    if not isinstance(value, dict):
        raise ProtocolError(f"argument {name!r} is a {type(value).__name__}, not a map")
    raw, topic, partition = value.get("topic_id"), value.get("topic"), value.get("partition")
    if not isinstance(raw, bytes) or len(raw) != 16:
        raise ProtocolError(f"argument {name!r}: topic_id is not 16 bytes")
    if not isinstance(topic, str) or not isinstance(partition, int):
        raise ProtocolError(f"argument {name!r}: topic or partition missing")
    try:
        return TopicIdPartition(uuid.UUID(bytes=raw), topic, partition)
    except ValueError as e:
        raise ProtocolError(f"argument {name!r}: {e}") from e


def topic_id_partitions(args: Mapping[str, Any], name: str) -> list[TopicIdPartition]:
    values = arg(args, name, list)
    return [topic_id_partition(v, f"{name}[{i}]") for i, v in enumerate(values)]


def metadata_arg(args: Mapping[str, Any], name: str, kind: type[_Event]) -> _Event:
    """Kafka's serde bytes in ``args[name]``, decoded and checked to be a ``kind``."""
    event = decode(arg(args, name, bytes))
    if not isinstance(event, kind):
        raise ProtocolError(
            f"argument {name!r} holds a {type(event).__name__}, not a {kind.__name__}"
        )
    return event


def metadata_bytes(event: RemoteLogMetadata | None) -> bytes | None:
    """Kafka's serde bytes of ``event`` (None stays None)."""
    return None if event is None else encode(event)


__all__ = [
    "ERROR_TYPES",
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "arg",
    "error_type",
    "frame",
    "metadata_arg",
    "metadata_bytes",
    "optional_arg",
    "read_frame",
    "topic_id_partition",
    "topic_id_partitions",
]
