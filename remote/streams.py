"""Byte ranges and the verifying stream every fetch returns.

Invariant: a stream never hands out more or fewer bytes than the object holds for the
range without raising: a short object is a RemoteIntegrityError, and a read of the whole
object is checked against the CRC-32C recorded when it was written (when one was).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from remote.errors import InvalidRangeError, RemoteIntegrityError, RemoteStorageError
from remote.manifest import crc32c_of

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


def resolve_range(
    name: str, size: int, start_position: int, end_position: int | None
) -> tuple[int, int]:
    """(start, length) of an inclusive range clamped to an object of ``size`` bytes."""
    if start_position >= size and not (size == 0 and start_position == 0):
        raise InvalidRangeError(
            f"{name}: start_position {start_position} is past the end of the {size}-byte object"
        )
    end = size - 1 if end_position is None else min(end_position, size - 1)
    return start_position, max(0, end - start_position + 1)


class _VerifyingRaw(io.RawIOBase):
    """Hands out exactly ``length`` bytes from ``read``; checks the CRC when it covers all."""

    def __init__(
        self,
        name: str,
        read: Callable[[int], bytes],
        release: Callable[[], None],
        length: int,
        expected_crc32c: int | None,
        translate: Callable[[Exception], Exception] | None,
    ) -> None:
        super().__init__()
        self._name = name
        self._read = read
        self._release = release
        self._length = length
        self._remaining = length
        self._expected = expected_crc32c
        self._translate = translate
        self._crc = 0

    def readable(self) -> bool:
        return True

    def _next(self, n: int) -> bytes:
        try:
            data = self._read(n)
        except RemoteStorageError:
            raise
        except Exception as e:
            if self._translate is None:
                raise
            raise self._translate(e) from e
        if not data:
            raise RemoteIntegrityError(
                f"{self._name}: stream ended after {self._length - self._remaining} of "
                f"{self._length} bytes"
            )
        if len(data) > self._remaining:
            data = data[: self._remaining]
        self._remaining -= len(data)
        if self._expected is not None:
            self._crc = crc32c_of(data, self._crc)
            if self._remaining == 0 and self._crc != self._expected:
                raise RemoteIntegrityError(
                    f"{self._name}: CRC-32C {self._crc:08x} of the fetched object does not "
                    f"match {self._expected:08x} recorded when it was written"
                )
        return data

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._remaining == 0 or len(view) == 0:
            return 0
        data = self._next(min(len(view), self._remaining))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        # One large read instead of RawIOBase's 8 KiB loop (fast ranged fetches).
        chunks = []
        while self._remaining > 0:
            chunks.append(self._next(self._remaining))
        return b"".join(chunks)

    def close(self) -> None:
        if not self.closed:
            try:
                self._release()
            finally:
                super().close()


def verifying_stream(
    name: str,
    read: Callable[[int], bytes],
    release: Callable[[], None],
    length: int,
    expected_crc32c: int | None = None,
    translate: Callable[[Exception], Exception] | None = None,
) -> BinaryIO:
    """A buffered binary stream over ``read`` limited to ``length`` bytes (see _VerifyingRaw)."""
    raw = _VerifyingRaw(name, read, release, length, expected_crc32c, translate)
    return io.BufferedReader(raw, buffer_size=256 * 1024)


__all__ = ["resolve_range", "verifying_stream"]
