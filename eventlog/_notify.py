"""Wake-ups for followers: futures completed by the writer, never polled.

Invariant: ``notify_all`` completes every future handed out before it was called, so a
reader that checks its condition and then awaits ``wait()`` (with no await between the
two) cannot miss an append on the single-threaded event loop.
"""

from __future__ import annotations

import asyncio


class Notifier:
    """A set of one-shot waiters, all released together."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def wait(self) -> asyncio.Future[None]:
        """A future completed by the next ``notify_all``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def notify_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            # A reader cancelled while waiting leaves a cancelled future behind.
            if not future.done():
                future.set_result(None)
