"""The custom metadata of one partition's segments, packed (a column of the cache).

Every segment rlmm copies carries custom metadata (its manifest, about 60 bytes), so a
partition that keeps its archive keeps one value per segment for good. As a ``dict``
of ``bytes`` that was two small long-lived objects per segment (the value and its row
number) plus a slot, about 180 bytes, each one pinning a small-object pool it shares
with transient objects. Here the values are bytes of one ``bytearray`` and each row's
place is two array entries: about 70 bytes, and no object per segment.

Invariant: ``get(row)`` is the value last ``set`` for ``row``, or None (never set,
``pop``-ped, or a row past the end). A replaced or popped value's bytes stay in the
blob as garbage until the garbage is more than half of it, then the blob is rewritten
with the live values only, so the blob is at most about twice what is live.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Final

_REPACK_MIN_GARBAGE: Final = 64 * 1024  # below this, rewriting costs more than it frees
_NONE: Final = -1


class CustomMetadataColumn:
    """Row -> custom metadata bytes (or None), in one blob (see the module docstring).

    The blob and its two per-row arrays are one tuple, replaced whole by a rewrite, and
    ``set`` writes a row's offset last: a read on another thread meanwhile sees the old
    value or the new one, never a mix or a gap.
    """

    __slots__ = ("_data", "_garbage", "_live")

    def __init__(self) -> None:
        # blob; per row: offset in the blob or _NONE; per row: length
        self._data: tuple[bytearray, array[int], array[int]] = _empty()
        self._garbage = 0  # bytes of the blob no row points at
        self._live = 0  # rows with a value

    def __len__(self) -> int:
        """Rows that have a value."""
        return self._live

    def __bool__(self) -> bool:
        return self._live > 0

    @property
    def stored_bytes(self) -> int:
        """Bytes of the blob, garbage included."""
        return len(self._data[0])

    def get(self, row: int) -> bytes | None:
        blob, at, size = self._data
        start = at[row] if row < len(at) else _NONE  # read once: a set may run meanwhile
        if start == _NONE:
            return None
        return bytes(blob[start : start + size[row]])

    def set(self, row: int, value: bytes) -> None:
        if row < 0:
            raise IndexError(f"row {row}")
        self.pop(row)  # first: it may rewrite the blob
        blob, at, size = self._data
        grow = row + 1 - len(at)
        if grow > 0:
            size.extend([0] * grow)
            at.extend([_NONE] * grow)
        start = len(blob)
        blob += value
        size[row] = len(value)
        at[row] = start
        self._live += 1

    def pop(self, row: int) -> None:
        """Forget ``row``'s value (nothing when it has none)."""
        blob, at, size = self._data
        if row >= len(at) or at[row] == _NONE:
            return
        at[row] = _NONE
        self._garbage += size[row]
        self._live -= 1
        if self._garbage > _REPACK_MIN_GARBAGE and 2 * self._garbage > len(blob):
            self._rewrite(list(self.items()))

    def items(self) -> Iterator[tuple[int, bytes]]:
        """(row, value) of every row with a value, in row order."""
        blob, at, size = self._data
        for row, start in enumerate(at):
            if start != _NONE:
                yield row, bytes(blob[start : start + size[row]])

    def renumber(self, remap: Sequence[int]) -> None:
        """Move each value to ``remap[row]``; a row mapped to -1 loses its value."""
        self._rewrite([(remap[row], value) for row, value in self.items() if remap[row] >= 0])

    def _rewrite(self, values: list[tuple[int, bytes]]) -> None:
        fresh = CustomMetadataColumn()
        for row, value in values:
            fresh.set(row, value)
        self._data, self._garbage, self._live = fresh._data, 0, fresh._live


def _empty() -> tuple[bytearray, array[int], array[int]]:
    return bytearray(), array("q"), array("I")


__all__ = ["CustomMetadataColumn"]
