"""Running blocking RSM and file calls off the event loop without leaking them.

Invariant: a call started here is finished (its thread returned) before the awaiting
coroutine gets control back, even when that coroutine is cancelled: the thread cannot
be stopped, so cancellation waits for it and is then re-raised, never swallowed.
The same holds for ``finish``: the wrapped cleanup always runs to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def finish(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even if we are cancelled meanwhile; then re-raise that."""
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def run_blocking(
    slots: asyncio.Semaphore, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``fn(*args)`` in a worker thread, at most ``slots`` at a time; see the invariant."""
    async with slots:
        return await finish(asyncio.to_thread(fn, *args, **kwargs))


__all__ = ["finish", "run_blocking"]
