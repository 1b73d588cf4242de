"""Running blocking RSM and file calls off the event loop without leaking them.

Invariant: a call started here is finished (its thread returned) before the awaiting
coroutine gets control back, even when that coroutine is cancelled: the thread cannot
be stopped, so cancellation waits for it and is then re-raised, never swallowed.
The same holds for ``finish``: the wrapped cleanup always runs to its end.
``run_cancellable`` tells its call of a cancellation (an event it may wait on) before
waiting for it, so a call that waits on the event ends early.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def finish(awaitable: Awaitable[T], on_cancel: Callable[[], object] = lambda: None) -> T:
    """Await ``awaitable`` to its end even if we are cancelled meanwhile (calling
    ``on_cancel`` then); then re-raise that."""
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
            on_cancel()
        except BaseException:
            if cancelled:  # the call failed after we were cancelled: still a cancellation
                raise asyncio.CancelledError from None
            raise
    if cancelled:
        raise asyncio.CancelledError
    return result


async def run_blocking(
    slots: asyncio.Semaphore, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``fn(*args)`` in a worker thread, at most ``slots`` at a time; see the invariant."""
    async with slots:
        return await finish(asyncio.to_thread(fn, *args, **kwargs))


async def run_cancellable(slots: asyncio.Semaphore, fn: Callable[[threading.Event], T]) -> T:
    """``fn(cancelled)`` in a worker thread, at most ``slots`` at a time; a cancellation
    sets ``cancelled`` first, then waits for ``fn`` as ``run_blocking`` does."""
    cancelled = threading.Event()
    async with slots:
        return await finish(asyncio.to_thread(fn, cancelled), cancelled.set)


__all__ = ["finish", "run_blocking", "run_cancellable"]
