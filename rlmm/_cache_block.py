"""One user partition's cache as a self-contained encoded block (for lazy snapshot restore).

A block is the msgpack of::

    [BLOCK_VERSION, topic_id (16 bytes), partition, segments, epochs, total_size_bytes]
    segments: [[uuid16, start, end, max_ts, broker, event_ts, size, flat_epochs, state,
                custom_metadata, txn_index_empty], ...]
    epochs:   [[epoch, starts, ends, segment_indexes, unreferenced_indexes, highest,
                size_bytes], ...]

The epoch index is stored as it is held in memory (``starts``/``ends`` lists, segments
by position), so decoding builds the segment objects and then only assigns lists.

Invariant: ``decode_block(tp, encode_block(cache))`` has the fingerprint of ``cache``;
a block that is not a consistent cache of ``tp`` raises BlockError and builds nothing
(a block whose bytes are well formed but whose values were forged is trusted: blocks
come from CRC-checked snapshot files that only this code writes).

The decoder builds the frozen model objects through mutable "shadow" classes with the
same slot layout and then switches their ``__class__``: plain slot stores instead of
~15 ``object.__setattr__`` calls per segment, 5x faster, which is what keeps a cold
partition's first read within a few milliseconds. The fast path loads only if the
layout check and a probe object built both ways agree (``FAST_BLOCKS``); otherwise the
codec's builders are used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgpack

from rlmm import _codec_build as _build
from rlmm._codec_wire import FAST_UUID, uuid_from_int
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from rlmm.cache import RemoteLogMetadataCache

BLOCK_VERSION: Final = 2
_STATES: Final = tuple(RemoteLogSegmentState)


class BlockError(ValueError):
    """The bytes are not a consistent block of the expected partition."""


def segment_to_state(m: RemoteLogSegmentMetadata) -> list[Any]:
    """msgpack-ready fields of one segment (the same list in snapshot format 1 and 2)."""
    epochs: list[int] = []
    for epoch, start in m.segment_leader_epochs.items():
        epochs += (epoch, start)
    return [
        m.remote_log_segment_id.id.bytes,
        m.start_offset,
        m.end_offset,
        m.max_timestamp_ms,
        m.broker_id,
        m.event_timestamp_ms,
        m.segment_size_in_bytes,
        epochs,
        int(m.state),
        m.custom_metadata,
        m.txn_index_empty,
    ]


def encode_block(cache: RemoteLogMetadataCache) -> bytes:
    tp = cache.topic_id_partition
    metas = list(cache.segments.values())
    position = {m.remote_log_segment_id: i for i, m in enumerate(metas)}
    epochs = [
        [
            epoch,
            st.starts,
            st.ends,
            [position[m.remote_log_segment_id] for m in st.metas],
            [position[sid] for sid in st.unreferenced],
            st.highest_offset,
            st.size_bytes,
        ]
        for epoch, st in cache.epochs.items()
    ]
    segments = [segment_to_state(m) for m in metas]
    total = cache.total_size_bytes
    body = [BLOCK_VERSION, tp.topic_id.bytes, tp.partition, segments, epochs, total]
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return data


# ---- building segments -------------------------------------------------------------------

_Builder = Callable[[TopicIdPartition, list[Any]], tuple[list[RemoteLogSegmentId], list[Any]]]


def _slow_segments(
    tp: TopicIdPartition, items: list[Any]
) -> tuple[list[RemoteLogSegmentId], list[RemoteLogSegmentMetadata]]:
    sids = []
    metas = []
    for raw, start, end, max_ts, broker, event_ts, size, flat, state, custom, txn in items:
        sid = _build.segment_id(tp, uuid_from_int(int.from_bytes(raw, "big")))
        sids.append(sid)
        metas.append(
            _build.segment_metadata(
                sid,
                start,
                end,
                max_ts,
                broker,
                event_ts,
                size,
                {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)},
                _STATES[state],
                custom,
                txn,
            )
        )
    return sids, metas


class _SegmentIdShadow:
    __slots__ = RemoteLogSegmentId.__slots__


class _SegmentShadow:
    __slots__ = RemoteLogSegmentMetadata.__slots__


def _fast_segments(tp: TopicIdPartition, items: list[Any]) -> tuple[list[Any], list[Any]]:
    # uuid.UUID built as _codec_wire's fast path does (FAST_UUID is part of the check).
    new = object.__new__
    set_slot = object.__setattr__
    uuid_cls = uuid.UUID
    unknown = uuid.SafeUUID.unknown
    sid_cls = RemoteLogSegmentId
    meta_cls = RemoteLogSegmentMetadata
    states = _STATES
    from_bytes = int.from_bytes
    proxy = MappingProxyType
    sids = []
    metas = []
    for raw, start, end, max_ts, broker, event_ts, size, flat, state, custom, txn in items:
        n = from_bytes(raw, "big")
        u = new(uuid_cls)
        set_slot(u, "int", n)
        set_slot(u, "is_safe", unknown)
        sid = _SegmentIdShadow()
        sid.topic_id_partition = tp  # type: ignore[attr-defined]
        sid.id = u  # type: ignore[attr-defined]
        sid._hash = hash(n)  # type: ignore[attr-defined]  # as RemoteLogSegmentId.__post_init__
        sid.__class__ = sid_cls  # type: ignore[assignment]
        m = _SegmentShadow()
        m.remote_log_segment_id = sid  # type: ignore[attr-defined]
        m.start_offset = start  # type: ignore[attr-defined]
        m.end_offset = end  # type: ignore[attr-defined]
        m.max_timestamp_ms = max_ts  # type: ignore[attr-defined]
        m.broker_id = broker  # type: ignore[attr-defined]
        m.event_timestamp_ms = event_ts  # type: ignore[attr-defined]
        m.segment_size_in_bytes = size  # type: ignore[attr-defined]
        m.segment_leader_epochs = proxy(  # type: ignore[attr-defined]
            {flat[0]: flat[1]}
            if len(flat) == 2
            else {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        )
        m.state = states[state]  # type: ignore[attr-defined]
        m.custom_metadata = custom  # type: ignore[attr-defined]
        m.txn_index_empty = txn  # type: ignore[attr-defined]
        m.__class__ = meta_cls  # type: ignore[assignment]
        sids.append(sid)
        metas.append(m)
    return sids, metas


def _fast_path_works() -> bool:
    """The shadow classes share the model's layout and build equal objects."""
    if (
        _SegmentIdShadow.__slots__ != RemoteLogSegmentId.__slots__
        or _SegmentShadow.__slots__ != RemoteLogSegmentMetadata.__slots__
        or not _build.FAST_BUILD
        or not FAST_UUID
    ):
        return False
    tp = TopicIdPartition(uuid_from_int(1 << 100), "probe", 3)
    probe = [[(7 << 64 | 9).to_bytes(16, "big"), 5, 9, 11, 2, 13, 17, [0, 5, 4, 7], 1, b"x", True]]
    try:
        (fast_sid,), (fast,) = _fast_segments(tp, probe)
    except TypeError:  # __class__ assignment refused: the layouts differ
        return False
    (slow_sid,), (slow,) = _slow_segments(tp, probe)
    return (
        type(fast) is RemoteLogSegmentMetadata
        and type(fast_sid) is RemoteLogSegmentId
        and fast == slow
        and hash(fast_sid) == hash(slow_sid)
        and fast_sid == slow_sid
        and dict(fast.segment_leader_epochs) == {0: 5, 4: 7}
    )


FAST_BLOCKS: Final = _fast_path_works()
_segments: Final[_Builder] = _fast_segments if FAST_BLOCKS else _slow_segments


def segments_from_state(
    tp: TopicIdPartition, items: list[Any]
) -> tuple[list[RemoteLogSegmentId], list[RemoteLogSegmentMetadata]]:
    """Segment ids and metadata of :func:`segment_to_state` lists (trusted input)."""
    return _segments(tp, items)


# ---- decoding ------------------------------------------------------------------------------


def decode_block(tp: TopicIdPartition, data: bytes, cache: RemoteLogMetadataCache) -> None:
    """Fill the empty ``cache`` of ``tp`` from ``data``; BlockError if it is not consistent."""
    from rlmm.cache import RemoteLogLeaderEpochState

    limit = len(data)
    try:
        body = msgpack.unpackb(
            data,
            raw=False,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit // 2,
            max_ext_len=0,
        )
        version, topic_id, partition, segments_state, epochs_state, total = body
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BlockError(f"not a cache block: {type(exc).__name__}: {exc}") from exc
    if version != BLOCK_VERSION:
        raise BlockError(f"block version {version!r}, expected {BLOCK_VERSION}")
    if topic_id != tp.topic_id.bytes or partition != tp.partition:
        raise BlockError(f"the block holds another partition (partition {partition!r})")
    try:
        sids, metas = _segments(tp, segments_state)
        segments = dict(zip(sids, metas, strict=True))
        if len(segments) != len(metas):
            raise BlockError("a segment id appears twice")
        if total != sum(m.segment_size_in_bytes for m in metas):
            raise BlockError(f"total size {total!r} is not the sum of the segments' sizes")
        epochs = {}
        for epoch, starts, ends, indexes, unreferenced, highest, size in epochs_state:
            if not len(starts) == len(ends) == len(indexes):
                raise BlockError(f"epoch {epoch}: index lists of different lengths")
            if (indexes and min(indexes) < 0) or (unreferenced and min(unreferenced) < 0):
                raise BlockError(f"epoch {epoch}: negative segment index")
            st = RemoteLogLeaderEpochState()
            st.starts = starts
            st.ends = ends
            st.metas = [metas[i] for i in indexes]
            st.unreferenced = {sids[i] for i in unreferenced}
            st.highest_offset = highest
            st.size_bytes = size
            epochs[epoch] = st
    except BlockError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        raise BlockError(f"inconsistent cache block: {type(exc).__name__}: {exc}") from exc
    cache.segments = segments
    cache.epochs = epochs
    cache.total_size_bytes = total
