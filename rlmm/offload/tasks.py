"""The sidecar's own asyncio tasks: cancelled within a bound, their stacks said on demand.

Invariant: cancelling a task here never waits on it forever (one that outlives the
bound is said loudly, with where it waits, and left) and never swallows the caller's
own cancellation.
"""

from __future__ import annotations

import asyncio
import io
import logging

# The sidecar's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.offload.sidecar")


def dump_tasks() -> None:
    """Log where every asyncio task of the process waits (SIGUSR1: a stuck sidecar says
    what it is stuck on, without a debugger)."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    for task in tasks:
        task.print_stack(file=out)
    log.warning("SIGUSR1: %d asyncio tasks\n%s", len(tasks), out.getvalue())


async def cancel_task(task: asyncio.Task[object], timeout_s: float = 60.0) -> None:
    """Cancel ``task`` and wait (bounded) until it ended; our own cancellation still
    propagates. A task that outlives the bound is a bug: said loudly, never waited on."""
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done:
        where = io.StringIO()
        task.print_stack(file=where)
        log.error("task %s did not end within %gs of its cancellation; it waits at:\n%s",
                  task.get_name(), timeout_s, where.getvalue())  # fmt: skip


__all__ = ["cancel_task", "dump_tasks"]
