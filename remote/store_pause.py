"""A store-wide pause while remote storage keeps refusing a store's copies.

When one call of a copy still finds the store unavailable after the client's own
retries, every copy of the store holds its next request instead of sending it, so an
outage or a brown-out does not cost the bytes of requests that would be refused.

Invariants:
- a pause starts when a call is refused while none runs; a refusal during a pause
  (a request already sent) neither extends nor doubles it. Pauses double, from
  ``first_s`` to ``max_s``, until a request (not a probe) is answered again;
- while paused, no caller is let through (``turn`` waits, up to the caller's deadline);
- when a pause has run out, the next caller probes the store (``probe``, a cheap request
  of its own) before any held request goes: the probe's answer ends the outage and lets
  everyone through, its refusal starts the next, longer pause. One probe at a time;
- during an outage (the last probe refused) a waiter also probes every ``probe_every_s``
  before the pause has run out; ``early_answers`` such probes answered in a row end the
  pause there, so the store takes copies within seconds of an outage's end rather than
  at the end of a pause of up to ``max_s``. One answered probe alone does not: in a
  brown-out that would let the held requests into the refusals every few seconds. An
  early probe refused changes nothing but the count;
- pauses are numbered (``pauses_started``); ``refused`` says whether it began one, so
  a caller can tell a pause its own refusal began and S3 ended by answering the probe
  (the store answers, this caller's request did not get through) from an outage
  (a probe refused too: ``outage_s`` adds up the time from each refused probe to the
  next answered one);
- ``close`` lets every waiter go at once, refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from remote.errors import RemoteStorageUnavailableError

_POLL_S = 0.25  # how often a waiter asks its give_up()


@dataclass(frozen=True)
class PauseTimes:
    """How long a store's pauses last, and how an outage is probed."""

    first_s: float = 0.5  # the first pause after a request was answered
    max_s: float = 8.0  # pauses double up to this
    probe_every_s: float = 1.0  # during an outage, a probe this often
    early_answers: int = 2  # probes answered in a row that end a pause early


class _Spells:
    """A running total of spells (of pause, of outage): ended ones plus the open one."""

    def __init__(self) -> None:
        self.total = 0.0
        self.since: float | None = None  # the open spell's start

    def begin(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def end(self, now: float) -> None:
        if self.since is not None:
            self.total += now - self.since
            self.since = None

    def seconds(self, now: float) -> float:
        return self.total + (0.0 if self.since is None else now - self.since)


class StorePause:
    """The outage state of one store, shared by its copies' threads."""

    def __init__(
        self,
        probe: Callable[[], None],
        times: PauseTimes = PauseTimes(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._times = times
        self._clock = clock
        self._cond = threading.Condition()
        self._pauses = 0  # pauses since a request was last answered: the next one's length
        self._paused = False  # from a refusal until a probe is answered
        self._until = 0.0
        self._probing = False
        self._probe_early = False  # the probe out was sent before its pause ran out
        self._last_probe = 0.0  # when the latest probe was sent
        self._answered_early = 0  # early probes answered in a row, in this pause
        self._closed = False
        self._held = _Spells()  # from a refusal that paused the store to the answered probe
        self._outages = _Spells()  # from a refused probe to the next answered one
        self.probes = 0  # probes sent, for tests and logs
        self.pauses_started = 0  # pauses begun so far, each by a refusal or a probe
        self.cause: RemoteStorageUnavailableError | None = None  # the latest refusal

    @property
    def paused(self) -> bool:
        """True from a refusal until a probe is answered."""
        with self._cond:
            return self._paused

    def remaining_s(self) -> float:
        """Seconds before a request may be sent again (0: now, or after a probe)."""
        with self._cond:
            if not self._paused:
                return 0.0
            return max(0.0, self._until - self._clock())

    def outage_s(self) -> float:
        """Seconds the store has spent in outages so far: from each refused probe to the
        next answered one (a monotonic sum; the difference of two readings is the outage
        time between them)."""
        with self._cond:
            return self._outages.seconds(self._clock())

    def paused_s(self) -> float:
        """Seconds the store has held its copies so far, from each refusal that paused
        it to the probe answered after it (a monotonic sum, the running pause included)."""
        with self._cond:
            return self._held.seconds(self._clock())

    def refused(self, error: RemoteStorageUnavailableError) -> bool:
        """A call ran out of the client's retries, refused as unavailable with ``error``;
        True when that began a pause (its number is then ``pauses_started``)."""
        with self._cond:
            self.cause = error
            now = self._clock()
            if self._paused and now < self._until:
                return False  # sent before this pause began: it already stands for it
            self._start_pause(now)
            return True

    def answered(self) -> None:
        """A request was answered: the next outage starts again from ``first_s``."""
        with self._cond:
            if not self._paused:
                self._pauses = 0

    def turn(self, deadline: float, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Wait until a request may go; False when ``deadline`` (of ``clock``), ``close``
        or ``give_up()`` (polled) comes first. The caller that finds a pause run out
        probes for all."""
        while True:
            with self._cond:
                if not self._wait_for_probe_or_turn(deadline, give_up):
                    return not self._paused and not self._closed and not give_up()
            self._send_probe()

    def _wait_for_probe_or_turn(self, deadline: float, give_up: Callable[[], bool]) -> bool:
        """Under the lock: True when this caller is to probe now; False when it may
        go, or must give up (the caller tells which)."""
        while True:
            if self._closed or give_up() or not self._paused:
                return False
            now = self._clock()
            if now >= deadline:
                return False
            if self._probing:  # until it is answered (its sender notifies)
                self._cond.wait(min(deadline - now, _POLL_S))
                continue
            due = min(self._until, self._next_early_probe())
            if now >= due:
                self._probing = True
                self._probe_early = now < self._until
                self._last_probe = now
                return True
            self._cond.wait(min(due - now, deadline - now, _POLL_S))

    def _next_early_probe(self) -> float:
        """When a probe may go before the pause has run out (never outside an outage)."""
        if self._outages.since is None:
            return float("inf")
        return self._last_probe + self._times.probe_every_s

    def _send_probe(self) -> None:
        answered = False
        try:
            self._probe()
            answered = True
        except RemoteStorageUnavailableError:
            pass
        except Exception:
            answered = True  # the store answered, if not as a probe would like
        finally:
            with self._cond:
                self._probing = False
                self.probes += 1
                self._probed(answered, self._clock())
                self._cond.notify_all()

    def _probed(self, answered: bool, now: float) -> None:
        """Under the lock: what a probe's answer (or refusal) does to the pause."""
        if self._probe_early:
            # Sent before the pause ran out, during an outage: only a run of answers
            # ends it; a refusal leaves the pause as it was.
            self._answered_early = self._answered_early + 1 if answered else 0
            if self._answered_early < self._times.early_answers:
                return
        self._answered_early = 0
        if answered:
            self._paused = False  # the length stays until a request is answered
            self._held.end(now)
            self._outages.end(now)
            return
        self._outages.begin(now)
        if not self._closed:
            self._start_pause(now)

    def close(self) -> None:
        """Refuse every waiter now and every later turn (the store is closing)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _start_pause(self, now: float) -> None:
        self._held.begin(now)
        self._paused = True
        self._pauses += 1
        self.pauses_started += 1
        first_s, max_s = self._times.first_s, self._times.max_s
        self._until = now + min(first_s * 2 ** min(self._pauses - 1, 20), max_s)
        self._cond.notify_all()
