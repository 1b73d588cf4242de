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
    """Row -> custom metadata bytes (or None), in one blob (see the module docstring)."""

    __slots__ = ("_at", "_blob", "_garbage", "_live", "_size")

    def __init__(self) -> None:
        self._blob = bytearray()
        self._at: array[int] = array("q")  # per row: offset in _blob, or _NONE
        self._size: array[int] = array("I")  # per row: length (meaningless when _NONE)
        self._garbage = 0  # bytes of _blob no row points at
        self._live = 0  # rows with a value

    def __len__(self) -> int:
        """Rows that have a value."""
        return self._live

    def __bool__(self) -> bool:
        return self._live > 0

    def get(self, row: int) -> bytes | None:
        if row >= len(self._at):
            return None
        at = self._at[row]
        if at == _NONE:
            return None
        return bytes(self._blob[at : at + self._size[row]])

    def set(self, row: int, value: bytes) -> None:
        if row < 0:
            raise IndexError(f"row {row}")
        self.pop(row)  # first: it may rewrite the arrays
        grow = row + 1 - len(self._at)
        if grow > 0:
            self._at.extend([_NONE] * grow)
            self._size.extend([0] * grow)
        self._at[row] = len(self._blob)
        self._size[row] = len(value)
        self._blob += value
        self._live += 1

    def pop(self, row: int) -> None:
        """Forget ``row``'s value (nothing when it has none)."""
        if row >= len(self._at) or self._at[row] == _NONE:
            return
        self._at[row] = _NONE
        self._garbage += self._size[row]
        self._live -= 1
        if self._garbage > _REPACK_MIN_GARBAGE and 2 * self._garbage > len(self._blob):
            self._rewrite(list(self.items()))

    def items(self) -> Iterator[tuple[int, bytes]]:
        """(row, value) of every row with a value, in row order."""
        blob, sizes = self._blob, self._size
        for row, at in enumerate(self._at):
            if at != _NONE:
                yield row, bytes(blob[at : at + sizes[row]])

    def renumber(self, remap: Sequence[int]) -> None:
        """Move each value to ``remap[row]``; a row mapped to -1 loses its value."""
        self._rewrite([(remap[row], value) for row, value in self.items() if remap[row] >= 0])

    def _rewrite(self, values: list[tuple[int, bytes]]) -> None:
        self._blob = bytearray()
        self._at = array("q")
        self._size = array("I")
        self._garbage = self._live = 0
        for row, value in values:
            self.set(row, value)


__all__ = ["CustomMetadataColumn"]
