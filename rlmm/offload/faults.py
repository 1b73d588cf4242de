"""Test-only kill points: SIGKILL this process at a named step of a copy or a delete.

Set ``_RLMM_OFFLOAD_KILL_AT=<step>@<n>`` to kill at the n-th time ``step`` is reached
(``<step>@<n>~<ms>`` kills ``ms`` milliseconds later, from a timer thread, so the kill
lands inside the RSM call that follows: mid-upload, mid-delete). The variable does not
start with ``RLMM_`` on purpose: it is not a setting. Invariant: without the variable
every call is a no-op costing one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "_RLMM_OFFLOAD_KILL_AT"
STEPS = (
    "copy.after_started",
    "copy.upload",
    "copy.after_upload",
    "copy.after_finished",
    "delete.after_started",
    "delete.rsm",
    "delete.after_delete",
)


def _parse(spec: str | None) -> tuple[str, int, float | None] | None:
    if not spec:
        return None
    step, _, rest = spec.partition("@")
    count, _, delay = rest.partition("~")
    if step not in STEPS:
        raise ValueError(f"{ENV}: unknown step {step!r}; one of {STEPS}")
    return step, int(count or 1), float(delay) / 1000 if delay else None


class KillPoints:
    """Counts arrivals at each step and kills the process at the configured one."""

    def __init__(self, spec: str | None = None) -> None:
        self._target = _parse(spec if spec is not None else os.environ.get(ENV))
        self._seen = 0

    def hit(self, step: str) -> None:
        if self._target is None or step != self._target[0]:
            return
        self._seen += 1
        if self._seen != self._target[1]:
            return
        delay = self._target[2]
        if delay is None:
            os.kill(os.getpid(), signal.SIGKILL)
            return
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()


__all__ = ["ENV", "STEPS", "KillPoints"]
