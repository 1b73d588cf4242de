"""Cancellation that third-party clients turn into their own errors.

Invariant: a task of this package that is being cancelled never treats the error a
library raised in place of ``CancelledError`` (aiokafka does this when its internal
tasks are cancelled) as retriable: it re-raises the cancellation instead, so
``task.cancel()`` and ``asyncio.run``'s shutdown always end the task.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelling(exc: BaseException) -> None:
    """Raise ``CancelledError`` (from ``exc``) if the current task is being cancelled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc
