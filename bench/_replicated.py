"""The soak's replicated mode (``bench/soak.py --brokers 3``): leadership that moves,
and what it costs.

Job: on a three-node ApacheKafkaCluster, rotate broker SIGKILLs, restarts and preferred
leader elections through the run (``BrokerChaos``); watch which node leads each soak
partition, so that every leadership change is known with its time and cause
(``LeaderWatch``); record, for every rolled local segment of every replica, the size of
each record batch (``BatchLedger``: Kafka deletes local segments while the run goes
on, so one replica's bytes for the archived offsets must be read while they exist);
scrape each sidecar's metrics (``SidecarMetrics``). From those and the metadata events,
compute the bytes uploaded over one replica's bytes (``bytes_figures``) and the time
from each leadership change to the new leader's first copy (``first_copy_figures``).

Invariants: never two nodes down at once (a node is killed only after ``heal``: every
node running, every partition of every topic led with its full ISR); every wait is
bounded; the figures come from the metadata (segment sizes, broker ids, event
timestamps), the replicas' log dirs and the sidecars' metrics, never from estimates:
a segment or a change that cannot be measured is counted as such, not guessed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
import urllib.request
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from remote.errors import SegmentFormatError
from remote.segments.batch import iter_batch_headers
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster, request_metadata

TP = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _clock(ms: int) -> str:
    """Local wall-clock time of ``ms``, as the soak's and the sidecars' log lines show it."""
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


# --- who leads ---------------------------------------------------------------------


@dataclass(frozen=True)
class LeaderChange:
    """One soak partition's leader changed from ``old`` to ``new`` (at ``epoch``), first
    seen at wall-clock ``at_ms``, while the soak was doing ``cause``."""

    topic: str
    partition: int
    old: int
    new: int
    epoch: int
    at_ms: int
    cause: str


class LeaderWatch:
    """Polls the cluster's Metadata (v7, with leader epochs) for the soak topics every
    ``every`` s; a change counts when a newer leader epoch names another node."""

    def __init__(self, cluster: ApacheKafkaCluster, topics: Iterable[str]) -> None:
        self.cluster = cluster
        self.topics = sorted(topics)
        self.cause = "start"
        self.leaders: dict[TP, tuple[int, int]] = {}  # (leader, epoch), -1: none now
        self.changes: list[LeaderChange] = []
        self.leaderless_polls = 0  # polls that found a soak partition without a leader
        self.unanswered = 0  # polls no live node answered

    def poll_once(self) -> None:
        meta = None
        for node in self.cluster.live_ids():
            try:
                meta = request_metadata(self.cluster.node(node).port, self.topics, timeout=1.0)
                break
            except OSError:
                continue
        if meta is None:
            self.unanswered += 1
            return
        now = _now_ms()
        leaderless = False
        for topic, (_error, parts) in meta.topics.items():
            for p, state in parts.items():
                key = (topic, p)
                if state.leader < 0:
                    leaderless = True
                    continue
                prev = self.leaders.get(key)
                if prev is not None and state.leader_epoch <= prev[1]:
                    continue  # the same, or a node behind the controller
                if prev is not None and state.leader != prev[0]:
                    self.changes.append(LeaderChange(
                        topic, p, prev[0], state.leader, state.leader_epoch, now, self.cause
                    ))  # fmt: skip
                self.leaders[key] = (state.leader, state.leader_epoch)
        self.leaderless_polls += leaderless

    def led_by(self, node: int) -> list[TP]:
        return [tp for tp, (leader, _epoch) in self.leaders.items() if leader == node]

    async def run(self, stopping: asyncio.Event, every: float = 0.25) -> None:
        while not stopping.is_set():
            await asyncio.to_thread(self.poll_once)
            await asyncio.sleep(every)


# --- what moves leadership -------------------------------------------------------------


class BrokerChaos:
    """Rotates through the nodes: SIGKILL one, let the cluster fail its partitions over,
    keep it down a while, restart it and wait until every ISR is full again, then a
    preferred leader election hands its partitions back; a pause; the next node."""

    def __init__(
        self,
        cluster: ApacheKafkaCluster,
        watch: LeaderWatch,
        rng: random.Random,
        down_s: tuple[float, float],
        pause_s: tuple[float, float],
        log: Callable[[str], None],
    ) -> None:
        self.cluster = cluster
        self.watch = watch
        self.rng = rng
        self.down_s = down_s
        self.pause_s = pause_s
        self.log = log
        self.kills = 0
        self.restarts = 0
        self.elections = 0
        self.election_failures: list[str] = []
        self.failover_s: list[float] = []  # SIGKILL -> no soak partition led by the node
        self.restart_s: list[float] = []  # start_node -> every ISR full again
        self.timeline: list[tuple[float, str]] = []  # (monotonic, what)

    def _mark(self, what: str) -> None:
        self.watch.cause = what
        self.timeline.append((time.monotonic(), what))
        self.log(what)

    async def run(self, start: float, end: float) -> None:
        """From monotonic ``start``, a cycle per node in turn until ``end``; returns with
        every node running, every ISR full and the preferred leaders leading."""
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        order = list(self.cluster.ids)
        self.rng.shuffle(order)
        turn = 0
        while time.monotonic() < end:
            node = order[turn % len(order)]
            turn += 1
            await self._kill(node)
            await asyncio.sleep(self.rng.uniform(*self.down_s))
            await self._restart(node)
            await self._elect()
            if time.monotonic() < end:
                await asyncio.sleep(self.rng.uniform(*self.pause_s))
        self.watch.cause = "after the broker chaos"

    async def _kill(self, node: int) -> None:
        # Never two down: the last cycle healed the cluster; check it again anyway.
        await asyncio.to_thread(self.cluster.heal, 180)
        t0 = time.monotonic()
        self._mark(f"broker {node}: SIGKILL")
        await asyncio.to_thread(self.cluster.kill, node)
        self.kills += 1
        deadline = t0 + 60
        while self.watch.led_by(node) and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
        self.failover_s.append(round(time.monotonic() - t0, 1))

    async def _restart(self, node: int) -> None:
        t0 = time.monotonic()
        self._mark(f"broker {node}: restart")
        await asyncio.to_thread(self.cluster.start_node, node)
        await asyncio.to_thread(self.cluster.heal, 180)
        self.restarts += 1
        self.restart_s.append(round(time.monotonic() - t0, 1))

    async def _elect(self) -> None:
        self._mark("preferred leader election")
        try:
            await asyncio.to_thread(self.cluster.elect_preferred)
            self.elections += 1
        except RuntimeError as e:
            self.election_failures.append(str(e)[-500:])
            self.log(f"preferred election failed: {str(e)[-300:]}")

    def report(self) -> dict[str, Any]:
        return {
            "broker_kills": self.kills, "broker_restarts": self.restarts,
            "preferred_elections": self.elections, "election_failures": self.election_failures,
            "failover_s": self.failover_s, "restart_to_full_isr_s": self.restart_s,
        }  # fmt: skip


# --- one replica's bytes -------------------------------------------------------------------


@dataclass
class _LocalSegment:
    file_size: int
    bases: array[int]  # each batch's base offset
    sizes: array[int]  # each batch's size in bytes


class BatchLedger:
    """Every rolled local segment of the soak partitions on every node, batch by batch
    (base offset, bytes), read while Kafka still holds it."""

    def __init__(self, log_dirs: dict[int, Path], partitions: Sequence[TP]) -> None:
        self.log_dirs = log_dirs
        self.partitions = list(partitions)
        # (node, topic, partition) -> {segment file base offset: its batches}
        self.segments: dict[tuple[int, str, int], dict[int, _LocalSegment]] = defaultdict(dict)
        self.unreadable = 0

    def scan_once(self) -> None:
        for node, log_dir in self.log_dirs.items():
            for topic, p in self.partitions:
                try:
                    logs = sorted((log_dir / f"{topic}-{p}").glob("*.log"))
                except OSError:
                    continue
                known = self.segments[(node, topic, p)]
                for path in logs[:-1]:  # the last one is active
                    try:
                        size = path.stat().st_size
                        seen = known.get(int(path.stem))
                        if seen is not None and seen.file_size == size:
                            continue
                        headers = list(iter_batch_headers(path))
                    except FileNotFoundError:
                        continue  # deleted by retention meanwhile
                    except (OSError, SegmentFormatError, ValueError):
                        self.unreadable += 1
                        continue
                    known[int(path.stem)] = _LocalSegment(
                        size,
                        array("q", (h.base_offset for h in headers)),
                        array("q", (h.size_in_bytes for h in headers)),
                    )

    async def run(self, stopping: asyncio.Event, every: float = 2.0) -> None:
        while not stopping.is_set():
            await asyncio.to_thread(self.scan_once)
            await asyncio.sleep(every)

    def batches(self, node: int, tp: TP, start: int, end: int) -> tuple[dict[int, int], bool]:
        """Batches of ``node``'s replica with a base offset in [start, end]: {base: bytes},
        and whether one local segment of that replica starts exactly at ``start``."""
        out: dict[int, int] = {}
        exact = False
        for seg in self.segments.get((node, *tp), {}).values():
            if not seg.bases or seg.bases[-1] < start or seg.bases[0] > end:
                continue
            exact = exact or seg.bases[0] == start
            for b, n in zip(seg.bases, seg.sizes, strict=True):
                if start <= b <= end:
                    out[b] = n
        return out, exact


def bytes_figures(
    added: dict[str, dict[str, Any]],
    finished: dict[str, int],
    ledger: BatchLedger,
    storm_ms: tuple[int, int],
    changes: Sequence[LeaderChange],
) -> dict[str, Any]:
    """Bytes uploaded (every copy attempt: each one wrote its segment's metadata, with its
    size, before uploading) over the bytes of one replica's log for the offsets ever
    archived (every finished copy, expired ones included), counted batch by batch from
    the uploader's own log dir, each batch once."""
    one: dict[TP, dict[int, int]] = defaultdict(dict)
    measured = {"from_uploader": 0, "from_another_replica": 0, "size_matches_metadata": 0,
                "unmeasured": 0}  # fmt: skip
    unmeasured_bytes = 0
    for sid, m in added.items():
        if sid not in finished:
            continue
        tp = (m["topic"], m["partition"])
        start, end, size = m["start_offset"], m["end_offset"], m["segment_size_in_bytes"]
        got, _exact = ledger.batches(m["broker_id"], tp, start, end)
        if sum(got.values()) == size:
            measured["from_uploader"] += 1
        else:
            for node in ledger.log_dirs:
                other, _ = ledger.batches(node, tp, start, end)
                if sum(other.values()) == size:
                    got = other
                    measured["from_another_replica"] += 1
                    break
            else:
                measured["unmeasured"] += 1
                unmeasured_bytes += size
                continue
        measured["size_matches_metadata"] += 1
        one[tp].update(got)
    one_replica = sum(sum(batches.values()) for batches in one.values()) + unmeasured_bytes
    attempts = list(added.values())
    all_bytes = sum(m["segment_size_in_bytes"] for m in attempts)
    finished_bytes = sum(added[sid]["segment_size_in_bytes"] for sid in finished if sid in added)
    failed = [m for sid, m in added.items() if sid not in finished]
    in_storm = [m for m in failed if storm_ms[0] <= m["event_timestamp_ms"] <= storm_ms[1]]
    stormy = {id(m) for m in in_storm}
    by_tp_changes: dict[TP, list[int]] = defaultdict(list)
    for c in changes:
        by_tp_changes[(c.topic, c.partition)].append(c.at_ms)
    near_change = [
        m for m in failed if id(m) not in stormy and any(
            abs(m["event_timestamp_ms"] - t) <= 10_000
            for t in by_tp_changes[(m["topic"], m["partition"])])
    ]  # fmt: skip

    def ratio(n: int) -> float | None:
        return round(n / one_replica, 4) if one_replica else None

    def tally(ms: list[dict[str, Any]]) -> dict[str, int]:
        return {"count": len(ms), "bytes": sum(m["segment_size_in_bytes"] for m in ms)}

    storm_bytes = tally(in_storm)["bytes"]
    return {
        "ratio": ratio(all_bytes),
        "one_replica_bytes": one_replica,
        "uploaded_bytes_every_attempt": all_bytes,
        "attempts": len(attempts),
        "finished": {"count": len(finished), "bytes": finished_bytes,
                     "over_one_replica": ratio(finished_bytes)},
        "not_finished": {
            **tally(failed), "in_storm": tally(in_storm),
            "outside_storm_within_10s_of_a_leadership_change": tally(near_change),
        },
        "every_attempt_but_the_storms_failed_ones_over_one_replica":
            ratio(all_bytes - storm_bytes),
        "segments_measured": measured,
    }  # fmt: skip


# --- how soon a new leader copies ------------------------------------------------------------


def first_copy_figures(
    changes: Sequence[LeaderChange],
    added: dict[str, dict[str, Any]],
    finished: dict[str, int],
    finished_by: dict[str, int],
    task_interval_s: float,
    end_ms: int,
    storm_ms: tuple[int, int],
) -> dict[str, Any]:
    """For each change, the time from when the soak saw it to the end of the new
    leader's first copy of that partition (its FINISHED event). A change superseded by
    the next one before any copy is counted apart; one never followed by a copy is a
    miss. Changes during the S3 storm (no copy can finish then) are also summed up
    apart."""
    copies: dict[TP, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for sid, ts in finished.items():
        m = added.get(sid)
        if m is not None:
            node = finished_by.get(sid, m["broker_id"])
            copies[(m["topic"], m["partition"])].append((ts, node, m))
    for lst in copies.values():
        lst.sort(key=lambda x: x[0])
    by_tp: dict[TP, list[LeaderChange]] = defaultdict(list)
    for c in sorted(changes, key=lambda c: c.at_ms):
        by_tp[(c.topic, c.partition)].append(c)
    rows: list[dict[str, Any]] = []
    superseded: list[dict[str, Any]] = []
    never: list[dict[str, Any]] = []
    for tp, cs in by_tp.items():
        for i, c in enumerate(cs):
            until = cs[i + 1].at_ms if i + 1 < len(cs) else end_ms
            # A copy the new leader finished up to a poll before the soak saw the change
            # (its own broker told it first) counts too.
            first = next(
                ((ts, m) for ts, node, m in copies.get(tp, [])
                 if node == c.new and c.at_ms - 1000 <= ts <= until), None
            )  # fmt: skip
            if first is None:
                (superseded if i + 1 < len(cs) else never).append(
                    {"tp": f"{c.topic}-{c.partition}", "cause": c.cause, "to": c.new}
                )
                continue
            ts, m = first
            rows.append({
                "tp": f"{c.topic}-{c.partition}", "cause": c.cause, "from": c.old, "to": c.new,
                "seen_at": _clock(c.at_ms), "copied_at": _clock(ts),
                "s": round((ts - c.at_ms) / 1000, 2),
                # From the change, or from the segment's roll when that came later: the
                # copy cannot start before its segment rolled (Kafka's cannot either).
                # The roll is its newest record (the next record, milliseconds later at
                # the soak's rates, rolls it).
                "from_roll_s": round((ts - max(c.at_ms, m["max_timestamp_ms"])) / 1000, 2),
                "in_storm": storm_ms[0] <= c.at_ms <= storm_ms[1],
                # > 0: the first copy's records were written after the change (the
                # new leader had nothing eligible before its next segment rolled)
                "newest_record_after_change_s": round((m["max_timestamp_ms"] - c.at_ms) / 1000, 2),
            })  # fmt: skip
    times = sorted(r["s"] for r in rows)
    calm = sorted(r["s"] for r in rows if not r["in_storm"])
    rolled = sorted(r["from_roll_s"] for r in rows if not r["in_storm"])
    target = 2 * task_interval_s
    causes: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        causes["broker SIGKILL" if "SIGKILL" in r["cause"] else r["cause"]].append(r["s"])
    return {
        "task_interval_s": task_interval_s,
        "target_s": target,
        "changes": len(changes),
        "measured": len(rows),
        "max": times[-1] if times else None,
        "median": round(statistics.median(times), 2) if times else None,
        "p90": times[min(len(times) - 1, int(0.9 * len(times)))] if times else None,
        "over_target": sum(1 for t in times if t > target),
        "outside_the_storm": {
            "measured": len(calm), "max": calm[-1] if calm else None,
            "median": round(statistics.median(calm), 2) if calm else None,
            "over_target": sum(1 for t in calm if t > target),
        },
        "outside_the_storm_from_the_change_or_the_roll": {
            "measured": len(rolled), "max": rolled[-1] if rolled else None,
            "median": round(statistics.median(rolled), 2) if rolled else None,
            "over_target": sum(1 for t in rolled if t > target),
        },
        "by_cause": {k: {"count": len(v), "max": max(v), "median": statistics.median(v)}
                     for k, v in causes.items()},
        "superseded_before_a_copy": superseded,
        "never_copied": never,
        "slowest": sorted(rows, key=lambda r: -r["s"])[:8],
    }  # fmt: skip


# --- the sidecars' own figures ---------------------------------------------------------------


class _Scraped(Protocol):
    port: int
    starts: int
    node: int | None

    def running(self) -> bool: ...


METRICS = {
    "rlmm_offload_partitions_led": "partitions_led",
    "rlmm_offload_leadership_changes": "leadership_changes",
    "rlmm_offload_leadership_known": "leadership_known",
    "rlmm_remote_copy_bytes": "copy_bytes",
    "rlmm_remote_copy_requests": "copy_requests",
    "rlmm_remote_copy_errors": "copy_errors",
}


def scrape(port: int, timeout: float = 2.0) -> dict[str, float]:
    """The sidecar's METRICS, each summed over its labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        text = r.read().decode()
    out: dict[str, float] = dict.fromkeys(METRICS.values(), 0.0)
    for family in text_string_to_metric_families(text):
        name = METRICS.get(family.name)
        if name is None:
            continue
        out[name] = sum(s.value for s in family.samples if not s.name.endswith("_created"))
    return out


@dataclass
class SidecarMetrics:
    """Each sidecar incarnation's last scrape, and the partitions led summed over the
    sidecars at each pass (two sidecars leading one partition would push it past the
    partitions' count)."""

    partitions: int
    last: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)
    led_sums: list[int] = field(default_factory=list)
    unknown_samples: int = 0  # a scrape with leadership_known 0
    failed: int = 0

    async def run(self, sidecars: Sequence[_Scraped], stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            led = 0
            complete = True
            for sc in sidecars:
                if not sc.running():
                    complete = False
                    continue
                try:
                    got = await asyncio.to_thread(scrape, sc.port)
                except OSError:
                    self.failed += 1
                    complete = False
                    continue
                self.last[(sc.node or 0, sc.starts)] = got
                led += int(got["partitions_led"])
                self.unknown_samples += got["leadership_known"] == 0
            if complete:
                self.led_sums.append(led)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 2.0)

    def report(self) -> dict[str, Any]:
        nodes = sorted({n for n, _gen in self.last})
        per_node = {}
        for node in nodes:
            incarnations = [v for (n, _g), v in self.last.items() if n == node]
            per_node[str(node)] = {
                k: int(sum(v[k] for v in incarnations))
                for k in ("leadership_changes", "copy_requests", "copy_errors", "copy_bytes")
            } | {"incarnations_scraped": len(incarnations)}
        return {
            "note": "each incarnation's last scrape (every 2 s), summed: a SIGKILLed one's"
                    " last seconds and the final --once rounds are not in it",
            "per_node": per_node,
            "copy_bytes_total": sum(v["copy_bytes"] for v in per_node.values()),
            "partitions_led_sum": {
                "partitions": self.partitions,
                "max": max(self.led_sums) if self.led_sums else None,
                "passes_over": sum(1 for n in self.led_sums if n > self.partitions),
                "passes": len(self.led_sums),
            },
            "scrapes_with_leadership_known_0": self.unknown_samples,  # (0 until a first round)
            "failed_scrapes": self.failed,
        }  # fmt: skip


__all__ = [
    "BatchLedger",
    "BrokerChaos",
    "LeaderChange",
    "LeaderWatch",
    "SidecarMetrics",
    "bytes_figures",
    "first_copy_figures",
    "scrape",
]
