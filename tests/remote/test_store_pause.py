"""The store-wide pause: nothing goes while it runs, one probe ends it, pauses double."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from remote.errors import RemoteResourceNotFoundError, RemoteStorageUnavailableError
from remote.store_pause import PauseTimes, StorePause

REFUSED = RemoteStorageUnavailableError("s3 put_object s3://b/k: SlowDown")


class Probe:
    """A probe that is refused while ``refusing`` is set; counts its calls."""

    def __init__(self, refusing: bool = False, error: Exception = REFUSED) -> None:
        self.refusing = refusing
        self.error = error
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.02)
        with self._lock:
            self.in_flight -= 1
        if self.refusing:
            raise self.error


def soon(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def test_a_store_that_answers_lets_every_call_go_at_once() -> None:
    probe = Probe()
    pause = StorePause(probe)
    assert not pause.paused and pause.remaining_s() == 0
    assert pause.turn(soon())
    assert probe.calls == 0


def test_a_refusal_holds_calls_for_the_pause_then_one_probe_lets_them_go() -> None:
    probe = Probe()
    pause = StorePause(probe, PauseTimes(first_s=0.3))
    pause.refused(REFUSED)
    assert pause.paused and 0.2 < pause.remaining_s() <= 0.3
    went: list[float] = []
    started = time.monotonic()

    def call() -> None:
        assert pause.turn(soon())
        went.append(time.monotonic() - started)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(went) == 6 and min(went) >= 0.29
    assert probe.calls == 1 and probe.most_in_flight == 1  # one probe stood for all
    assert not pause.paused and pause.cause is REFUSED


def test_a_refusal_during_a_pause_neither_extends_nor_doubles_it() -> None:
    clock = [100.0]
    pause = StorePause(Probe(), PauseTimes(first_s=1.0), clock=lambda: clock[0])
    pause.refused(REFUSED)
    clock[0] = 100.5
    pause.refused(REFUSED)  # a request sent before the pause
    assert pause.remaining_s() == pytest.approx(0.5)


def test_pauses_double_to_the_cap_until_a_request_is_answered() -> None:
    clock = [0.0]
    probe = Probe(refusing=True)
    pause = StorePause(probe, PauseTimes(first_s=1.0, max_s=4.0), clock=lambda: clock[0])
    lengths = []
    for _ in range(5):
        pause.refused(REFUSED)
        lengths.append(pause.remaining_s())
        clock[0] += lengths[-1]
    assert lengths == [1.0, 2.0, 4.0, 4.0, 4.0]
    # A refused probe starts the next pause, doubled as a refused request would.
    clock[0] = 1000.0
    pause = StorePause(probe, PauseTimes(first_s=1.0, max_s=4.0), clock=lambda: clock[0])
    pause.refused(REFUSED)
    clock[0] += 1.0
    assert not pause.turn(clock[0] + 10, lambda: probe.calls > 0)  # probes, then gives up
    assert probe.calls == 1 and pause.remaining_s() == 2.0
    # An answered probe lets calls go, but only an answered request resets the length.
    probe.refusing = False
    clock[0] += 2.0
    assert pause.turn(clock[0] + 1)
    pause.refused(REFUSED)
    assert pause.remaining_s() == 4.0
    clock[0] += 4.0
    assert pause.turn(clock[0] + 1)
    pause.answered()
    pause.refused(REFUSED)
    assert pause.remaining_s() == 1.0


def test_a_probe_answered_with_another_error_ends_the_pause() -> None:
    # A HeadBucket answered 404 or 403 is the store answering: requests go, and say why.
    refused_no_bucket = Probe(refusing=True, error=RemoteResourceNotFoundError("no bucket"))
    pause = StorePause(refused_no_bucket, PauseTimes(first_s=0.05))
    pause.refused(REFUSED)
    assert pause.turn(soon())
    assert not pause.paused


@pytest.mark.parametrize("ending", ["deadline", "close", "give_up"])
def test_a_waiting_call_leaves_at_its_deadline_on_close_or_when_it_gives_up(ending: str) -> None:
    pause = StorePause(Probe(refusing=True), PauseTimes(first_s=60.0))
    pause.refused(REFUSED)
    stop = threading.Event()
    outcome: list[bool] = []
    deadline = soon(0.3) if ending == "deadline" else soon(60)
    thread = threading.Thread(target=lambda: outcome.append(pause.turn(deadline, stop.is_set)))
    started = time.monotonic()
    thread.start()
    time.sleep(0.1)
    {"deadline": lambda: None, "close": pause.close, "give_up": stop.set}[ending]()
    thread.join(10)
    assert outcome == [False] and time.monotonic() - started < 2


def test_a_closed_pause_refuses_every_later_turn() -> None:
    pause = StorePause(Probe())
    pause.close()
    pause.refused(REFUSED)
    assert not pause.turn(soon())


def test_an_outage_runs_from_a_refused_probe_to_the_next_answered_one() -> None:
    clock = [100.0]
    probe = Probe(refusing=True)
    pause = StorePause(probe, PauseTimes(first_s=1.0, max_s=4.0), clock=lambda: clock[0])
    pause.refused(REFUSED)
    clock[0] += 1.0  # the first pause: a refused request, not yet an outage
    assert pause.outage_s() == 0.0
    assert not pause.turn(clock[0] + 10, lambda: probe.calls > 0)  # probe refused at 101
    clock[0] += 2.0
    assert pause.outage_s() == 2.0  # ongoing
    assert not pause.turn(clock[0] + 10, lambda: probe.calls > 1)  # refused again at 103
    clock[0] += 4.0
    probe.refusing = False
    assert pause.turn(clock[0] + 1)  # answered at 107: the outage was 6 s
    assert pause.outage_s() == 6.0
    clock[0] += 50.0
    pause.refused(REFUSED)  # a refused request alone starts no outage
    clock[0] += 4.0
    assert pause.outage_s() == 6.0


def polls(n: int) -> Callable[[], bool]:
    """A give_up that gives up at its n-th poll (with a fake clock, time stands still)."""
    count = [0]

    def give_up() -> bool:
        count[0] += 1
        return count[0] >= n

    return give_up


def test_during_an_outage_two_answered_probes_in_a_row_end_the_pause_early() -> None:
    clock = [0.0]
    probe = Probe(refusing=True)
    times = PauseTimes(first_s=4.0, max_s=8.0, probe_every_s=1.0)
    pause = StorePause(probe, times, clock=lambda: clock[0])
    pause.refused(REFUSED)
    clock[0] = 1.5
    assert not pause.turn(100, polls(3)) and probe.calls == 0  # not an outage yet
    clock[0] = 4.0
    assert not pause.turn(100, lambda: probe.calls >= 1)  # refused: an outage, until 12
    assert pause.remaining_s() == 8.0
    probe.refusing = False
    clock[0] = 5.0
    assert not pause.turn(100, lambda: probe.calls >= 2)  # answered early: one of two
    assert pause.paused
    clock[0] = 5.5
    assert not pause.turn(100, polls(3)) and probe.calls == 2  # the next is due at 6
    probe.refusing = True
    clock[0] = 6.0
    assert not pause.turn(100, lambda: probe.calls >= 3)  # refused early: the run restarts
    assert pause.paused and pause.remaining_s() == 6.0  # and the pause stands as it was
    probe.refusing = False
    clock[0] = 7.0
    assert not pause.turn(100, lambda: probe.calls >= 4)
    assert pause.paused
    clock[0] = 8.0
    assert pause.turn(100)  # the second answer in a row: 4 s before the pause's end
    assert probe.calls == 5 and not pause.paused and pause.outage_s() == 4.0


def test_paused_seconds_run_from_the_refusal_to_the_answered_probe() -> None:
    clock = [0.0]
    probe = Probe(refusing=True)
    pause = StorePause(probe, PauseTimes(first_s=1.0, max_s=8.0), clock=lambda: clock[0])
    assert pause.paused_s() == 0.0
    pause.refused(REFUSED)
    clock[0] = 1.0
    assert not pause.turn(100, lambda: probe.calls >= 1)  # refused: paused on, until 3
    clock[0] = 2.5
    assert pause.paused_s() == 2.5  # the running pause counts
    probe.refusing = False
    clock[0] = 3.0
    assert pause.turn(100)
    clock[0] = 10.0
    assert pause.paused_s() == 3.0
    pause.refused(REFUSED)  # a second spell adds to the first
    clock[0] = 14.0
    assert pause.turn(100)
    assert pause.paused_s() == 7.0
