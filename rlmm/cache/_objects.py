"""Model objects built without their constructors: the cache's fast path to them.

Job: the "shadow" classes, with the slot layout of ``RemoteLogSegmentId`` and
``RemoteLogSegmentMetadata``, whose instances get their slots stored plainly and then
their ``__class__`` switched (5x faster than ~15 ``object.__setattr__`` calls); a
uuid's two slots set through their descriptors; and the segment id builders, fast
(``fast_segment_id``) and through the codec's builders (``slow_segment_id``).

Invariant: an object built here equals, field for field and in hash and repr, the one
the constructors build: ``fast_path_works`` probes that on rows that take every branch,
and ``rlmm.cache._columns`` runs it at import and uses the fast copies only if it
holds (``FAST_OBJECTS``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from rlmm.codec import build as _build
from rlmm.codec import uuid_from_int
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from rlmm.cache._columns import SegmentColumns

# SegmentColumns.metadata's shape (its fast copy, or the constructors')
Metadata = Callable[["SegmentColumns", TopicIdPartition, int], RemoteLogSegmentMetadata]


class SegmentIdShadow:
    __slots__ = RemoteLogSegmentId.__slots__


class SegmentShadow:
    __slots__ = RemoteLogSegmentMetadata.__slots__


new_object = object.__new__
# The uuid's slots set through their descriptors: ~100 ns less a lookup than two
# object.__setattr__ calls (name lookups), same effect.
set_uuid_int = uuid.UUID.__dict__["int"].__set__
set_uuid_safe = uuid.UUID.__dict__["is_safe"].__set__
UUID_SAFETY_UNKNOWN = uuid.SafeUUID.unknown
_STATES = tuple(RemoteLogSegmentState)


def fast_segment_id(tp: TopicIdPartition, n: int) -> RemoteLogSegmentId:
    # uuid.UUID(int=n) without its argument parsing: its two slots set through their
    # descriptors; the probe compares the result with the constructor's.
    u = new_object(uuid.UUID)
    set_uuid_int(u, n)
    set_uuid_safe(u, UUID_SAFETY_UNKNOWN)
    sid = SegmentIdShadow()
    sid.topic_id_partition = tp  # type: ignore[attr-defined]
    sid.id = u  # type: ignore[attr-defined]
    sid._hash = hash(n)  # type: ignore[attr-defined]  # as RemoteLogSegmentId.__post_init__
    sid.__class__ = RemoteLogSegmentId  # type: ignore[assignment]
    return sid  # type: ignore[return-value]


def slow_segment_id(tp: TopicIdPartition, n: int) -> RemoteLogSegmentId:
    return _build.segment_id(tp, uuid_from_int(n))


def fast_path_works(fast: Metadata, columns: type[SegmentColumns]) -> bool:
    """``fast`` (the fast copy of :meth:`SegmentColumns.metadata`) and the fast segment id
    builder give the objects the constructors give, on rows of ``columns`` that take
    each branch (inline epoch, one pair, many pairs; with and without custom metadata)."""
    if (
        SegmentIdShadow.__slots__ != RemoteLogSegmentId.__slots__
        or SegmentShadow.__slots__ != RemoteLogSegmentMetadata.__slots__
        # the two slots fast_segment_id fills are all a uuid.UUID has
        or set(getattr(uuid.UUID, "__slots__", ())) != {"int", "is_safe", "__weakref__"}
    ):
        return False
    tp = TopicIdPartition(uuid_from_int(1 << 100), "probe", 3)
    cols = columns()
    for i, (epochs, custom) in enumerate(
        [({4: 5}, None), ({2: 7}, b"x"), ({0: 5, 4: 7}, None), ({1: 5, 2: 6, 3: 8}, b"")]
    ):
        n = (7 + i) << 64 | 9
        segment = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, uuid_from_int(n)),
            5, 9, 11, 2, 13, 17, epochs, _STATES[i], custom, bool(i % 2),
        )  # fmt: skip
        cols.append(segment)
    try:
        for row in range(len(cols)):
            fast_m, slow = fast(cols, tp, row), cols.metadata_by_constructors(tp, row)
            fast_sid = fast_segment_id(tp, cols.uuid_int(row))
            slow_sid = slow_segment_id(tp, cols.uuid_int(row))
            if not (
                type(fast_m) is RemoteLogSegmentMetadata
                and type(fast_sid) is RemoteLogSegmentId
                and fast_m == slow
                and repr(fast_m) == repr(slow)
                and hash(fast_m.remote_log_segment_id) == hash(slow.remote_log_segment_id)
                and fast_sid == slow_sid
                and hash(fast_sid) == hash(slow_sid)
                and dict(fast_m.segment_leader_epochs) == dict(slow.segment_leader_epochs)
            ):
                return False
    except TypeError:  # __class__ assignment refused: the layouts differ
        return False
    return True


__all__ = [
    "UUID_SAFETY_UNKNOWN",
    "Metadata",
    "SegmentIdShadow",
    "SegmentShadow",
    "fast_path_works",
    "fast_segment_id",
    "new_object",
    "set_uuid_int",
    "set_uuid_safe",
    "slow_segment_id",
]
