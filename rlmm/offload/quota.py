"""CopyQuota: the sidecar's one copy budget in bytes per second (Kafka's KIP-956).

Kafka's ``remote.log.manager.copy.max.bytes.per.second`` measured as Kafka measures
it: a rate over ``remote.log.manager.copy.quota.window.num`` samples of
``remote.log.manager.copy.quota.window.size.seconds`` each, where a young history
counts as if ``window.num - 1`` whole windows had passed (Kafka's ``Rate``), and a
copy that finds the rate over the bound waits ``(rate - bound) / bound x window``
(Kafka's ``QuotaUtils.throttleTime``), rechecking at least every second.

Invariants: one budget for every partition of the sidecar; a copy reserves its
segment's bytes before it starts, under a lock that serves waiters first come first
served (Kafka's fair lock), so no partition starves; without a bound (the default)
``reserve`` never waits and costs one comparison.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from rlmm.offload.errors import OffloadError

UNLIMITED = (1 << 63) - 1  # Kafka's default: Long.MAX_VALUE
# Kafka's RLM waits at most this long before it looks at the quota again.
RECHECK_S = 1.0


@dataclass
class _Sample:
    start_s: float
    bytes: int


class CopyQuota:
    """A byte rate bound over sampled windows, shared by every copy of a sidecar."""

    def __init__(
        self,
        bytes_per_second: int = UNLIMITED,
        *,
        window_num: int = 11,
        window_size_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if bytes_per_second <= 0:
            raise OffloadError(f"copy quota must be positive, got {bytes_per_second}")
        if window_num < 1 or window_size_s <= 0:
            raise OffloadError(
                f"copy quota windows must be positive, got {window_num} x {window_size_s} s"
            )
        self.bound = bytes_per_second
        self.window_num = window_num
        self.window_size_s = window_size_s
        self._clock = clock
        self._samples: deque[_Sample] = deque()
        self._lock = asyncio.Lock()  # FIFO: waiters are served in arrival order

    @property
    def limited(self) -> bool:
        return self.bound < UNLIMITED

    def _purge(self, now: float) -> None:
        # Kafka's purgeObsoleteSamples: a sample window.num windows old is gone.
        horizon = now - self.window_num * self.window_size_s
        while self._samples and self._samples[0].start_s <= horizon:
            self._samples.popleft()

    def record(self, nbytes: int) -> None:
        """Count ``nbytes`` copied now."""
        now = self._clock()
        self._purge(now)
        last = self._samples[-1] if self._samples else None
        if last is None or now >= last.start_s + self.window_size_s:
            last = _Sample(now, 0)
            self._samples.append(last)
            while len(self._samples) > self.window_num:
                self._samples.popleft()
        last.bytes += nbytes

    def _window_s(self, now: float) -> float:
        """The span the rate is over: the samples' age, at least ``window.num - 1``
        whole windows (Kafka's ``Rate.windowSize``)."""
        elapsed = now - self._samples[0].start_s if self._samples else 0.0
        full = int(elapsed / self.window_size_s)
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_size_s
        return max(elapsed, self.window_size_s)

    def rate(self) -> float:
        """Bytes per second over the sampled windows, as Kafka's ``Rate`` measures it."""
        now = self._clock()
        self._purge(now)
        return sum(s.bytes for s in self._samples) / self._window_s(now)

    def throttle_time_s(self) -> float:
        """How long a copy waits now (0: under the bound)."""
        if not self.limited:
            return 0.0
        over = self.rate() - self.bound
        return over / self.bound * self._window_s(self._clock()) if over > 0 else 0.0

    async def reserve(
        self, nbytes: int, on_throttle: Callable[[float], None] | None = None
    ) -> float:
        """Wait until the rate is under the bound, then count ``nbytes``; the seconds
        waited. ``on_throttle`` hears each throttle time found (Kafka's sensor)."""
        if not self.limited:
            return 0.0
        waited = 0.0
        async with self._lock:
            while (throttle := self.throttle_time_s()) > 0:
                if on_throttle is not None:
                    on_throttle(throttle)
                pause = min(throttle, RECHECK_S)
                await asyncio.sleep(pause)
                waited += pause
            self.record(nbytes)
        return waited


__all__ = ["RECHECK_S", "UNLIMITED", "CopyQuota"]
