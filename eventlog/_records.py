"""Argument checks shared by the backends: values, keys and offsets.

Invariant: what passes is a list of ``bytes`` (copied, so later mutation of a caller's
bytearray cannot change a record) and a non-negative int offset; anything else raises
a typed error before a single record is written.
"""

from __future__ import annotations

from collections.abc import Iterable

from eventlog.errors import InvalidOffsetError, InvalidRecordError

_BYTES_LIKE = (bytes, bytearray, memoryview)


def to_bytes(data: object, what: str, partition: int) -> bytes:
    if not isinstance(data, _BYTES_LIKE):
        raise InvalidRecordError(
            f"{what} for partition {partition} must be bytes-like, got {type(data).__name__}"
        )
    return bytes(data)


def check_values(values: Iterable[bytes], partition: int) -> list[bytes]:
    if isinstance(values, (*_BYTES_LIKE, str)):
        # A lone bytes would otherwise be taken as a sequence of ints.
        raise InvalidRecordError(
            f"append_batch to partition {partition} takes a sequence of values, "
            f"got a single {type(values).__name__}"
        )
    return [to_bytes(v, f"value #{i}", partition) for i, v in enumerate(values)]


def check_key(key: object, partition: int) -> bytes | None:
    return None if key is None else to_bytes(key, "key", partition)


def check_offset(offset: object, partition: int) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidOffsetError(
            f"start offset for partition {partition} must be an int >= 0, got {offset!r}"
        )
    return offset
