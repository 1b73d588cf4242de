"""Fail-closed facade: NotReadyRlmm until the real manager is ready, then a swap.

Invariant: SwappableRlmm reads its target once per call, so every call runs wholly
against the old or wholly against the new target, never a mix, and a swap never
makes a call fail; NotReadyRlmm raises RemoteStorageNotReadyError for everything.
"""

from __future__ import annotations

from typing import Any

from rlmm.errors import RemoteStorageNotReadyError

_READS = (
    "remote_log_segment_metadata",
    "highest_offset_for_epoch",
    "list_remote_log_segments",
    "remote_log_size",
    "next_segment_with_txn_index",
    "remote_partition_delete_state",
)
_ASYNC = (
    "add_remote_log_segment_metadata",
    "update_remote_log_segment_metadata",
    "put_remote_partition_delete_metadata",
    "on_partition_leadership_changes",
    "on_stop_partitions",
)


class NotReadyRlmm:
    """The RLMM a broker starts with: every call fails closed, retriably."""

    def __init__(self, reason: str = "the remote log metadata manager is starting") -> None:
        self.reason = reason

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise RemoteStorageNotReadyError(message=self.reason)

    async def _fail_async(self, *args: Any, **kwargs: Any) -> Any:
        raise RemoteStorageNotReadyError(message=self.reason)

    def is_ready(self, tp: Any) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        if name in _READS:
            return self._fail
        if name in _ASYNC:
            return self._fail_async
        raise AttributeError(name)

    async def close(self) -> None:
        return None


class SwappableRlmm:
    """Delegates every call to the current target; ``swap`` replaces it atomically."""

    def __init__(self, initial: Any | None = None) -> None:
        self._target: Any = initial if initial is not None else NotReadyRlmm()

    @property
    def target(self) -> Any:
        return self._target

    def swap(self, new: Any) -> Any:
        """Install ``new``; returns the previous target (the caller closes it)."""
        old, self._target = self._target, new
        return old

    def is_ready(self, tp: Any) -> bool:
        return bool(self._target.is_ready(tp))

    def __getattr__(self, name: str) -> Any:
        if name in _READS or name in _ASYNC:
            # Bound method of the target captured now: one call, one target.
            return getattr(self._target, name)
        raise AttributeError(name)

    async def close(self) -> None:
        await self._target.close()
