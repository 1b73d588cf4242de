"""rlmm.applied_waits: ``moved`` completes at the next applied batch, for every caller
at once, and a caller cancelled while waiting takes nobody's wake-up with it."""

from __future__ import annotations

import asyncio

from rlmm.applied_waits import AppliedWaits


async def test_moved_completes_at_the_next_wake_for_every_waiter() -> None:
    applied: dict[int, int] = {}
    waits = AppliedWaits(applied)
    first = asyncio.ensure_future(asyncio.shield(waits.moved()))
    second = asyncio.ensure_future(asyncio.shield(waits.moved()))
    await asyncio.sleep(0)
    assert not first.done() and not second.done()
    applied[3] = 7
    waits.wake(3)
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    later = waits.moved()  # asked after the wake: waits for the next one
    await asyncio.sleep(0)
    assert not later.done()
    waits.wake(3)
    await asyncio.wait_for(later, 1)


async def test_a_cancelled_waiter_leaves_the_others_theirs() -> None:
    waits = AppliedWaits({})
    gone = asyncio.ensure_future(asyncio.shield(waits.moved()))
    kept = asyncio.ensure_future(asyncio.shield(waits.moved()))
    await asyncio.sleep(0)
    gone.cancel()
    waits.wake(0)
    await asyncio.wait_for(kept, 1)
