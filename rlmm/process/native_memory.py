"""Keeping the sidecar's native memory bounded under glibc's malloc.

Job: a long-running ``rlmm offload`` allocates its large transient buffers (segment
chunks and multipart parts read for upload, decompressed batches for the CRC check,
HTTP bodies) from many threads (``asyncio.to_thread``, the S3 upload pool, the metrics
server). Under glibc's defaults each such thread gets its own malloc arena (up to
8 x cores), the mmap threshold rises to the largest block freed so far (up to 32 MiB),
so multi-MiB buffers land inside those arenas, and the freed space stays mapped: RSS
climbs over hours with no object alive to show for it. ``NativeMemory.bound()`` sets,
once at start: at most ``ARENA_MAX`` arenas, and a fixed ``MMAP_THRESHOLD`` (which
also turns off glibc's dynamic threshold), so a block that large is mmapped on its own
and unmapped when freed; ``NativeMemory.trim()`` (``malloc_trim(0)``) after each round
hands the free pages inside the arenas back to the OS.

Invariants: only glibc is touched (found by ``gnu_get_libc_version`` in the process);
elsewhere (musl, macOS, Windows) both calls are no-ops that return False. A setting the
operator gave glibc in the environment (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``)
is theirs and left alone. ``RLMM_NO_NATIVE_MEMORY_BOUND`` (anything but ``""`` or ``"0"``)
turns both calls into no-ops: a code-path switch for measuring glibc's defaults
(``bench/sidecar_memory.py``), not a setting. Nothing here allocates on behalf of the
caller or raises: a failed ``mallopt`` is logged and the sidecar goes on.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from typing import Final

log = logging.getLogger(__name__)

SWITCH_ENV: Final = "RLMM_NO_NATIVE_MEMORY_BOUND"
ARENA_MAX: Final = 2  # the event loop's thread and one shared by the worker threads
MMAP_THRESHOLD: Final = 1024 * 1024  # blocks this size and up: their own mapping
# glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - the probe: only glibc has it
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


class NativeMemory:
    """The sidecar's handle on glibc's malloc (see the module docstring)."""

    def __init__(self) -> None:
        switched_off = os.environ.get(SWITCH_ENV, "") not in ("", "0")
        self._libc = None if switched_off else _glibc()
        self.bounded: dict[str, int] = {}  # what bound() set: name -> value
        self.trims = 0  # malloc_trim calls made
        self.trim_seconds = 0.0  # their total time

    @property
    def active(self) -> bool:
        """True when glibc is the allocator here and the switch is not set."""
        return self._libc is not None

    def bound(self) -> bool:
        """Cap the arenas and fix the mmap threshold (once, before the threads start);
        True if anything was set."""
        if self._libc is None:
            return False
        for name, param, value in (
            ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
            ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ):
            if name in os.environ:  # the operator's choice wins
                continue
            if self._libc.mallopt(param, value) == 1:
                self.bounded[name] = value
            else:
                log.warning("mallopt(%s, %d) refused; glibc's default stays", name, value)
        if self.bounded:
            log.debug("native memory: glibc %s", self.bounded)
        return bool(self.bounded)

    def trim(self) -> bool:
        """Give the free pages of every arena back to the OS; True if glibc released any."""
        if self._libc is None:
            return False
        started = time.perf_counter()
        released = self._libc.malloc_trim(0) == 1
        self.trims += 1
        self.trim_seconds += time.perf_counter() - started
        return released


__all__ = ["ARENA_MAX", "MMAP_THRESHOLD", "SWITCH_ENV", "NativeMemory"]
