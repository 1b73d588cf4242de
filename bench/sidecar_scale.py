"""Benchmark: the `rlmm offload` sidecar over a broker's worth of partitions.

Builds (once, cached under ``--cache``) a Kafka log dir of 4,000 partitions x 20 rolled
segments (plus an active one each) with the project's segment writer, small segments
(4 KiB by default: the build takes minutes, not hours; the size is in the JSON), then
runs the real sidecar (``rlmm offload``, its own process: file event log, local remote
storage, the default 30 s task interval) over it and measures, against issue 27:

- the first round, which copies everything: segments/s and MB/s over the round, against
  ``bench/offload_pipeline.py``'s pipeline over 16 partitions of the same segments,
  measured in the same run with the same config (target >= 0.8x);
- idle rounds (nothing new): CPU seconds of the sidecar process per interval (the round
  and the sleep after it) over the interval (target <= 1% of one core), with what
  housekeeping took of it: seconds in Python's garbage collector by generation, the
  heap's refreezes, and malloc_trim (the sidecar's own counters);
- one new segment rolled in one partition after a round: copied by the next round
  (target: within one interval);
- busy rounds (no target): the round after the first, which runs every partition once
  more, and a round after every partition's active segment changed (as if each took
  writes): CPU seconds and milliseconds per partition;
- the sidecar's RSS, sampled every second, max (target <= 300 MiB);
- a ``/metrics`` scrape with every partition's gauges (target <= 100 ms).

CPU and RSS are the sidecar process's own (psutil), so the bench's own work does not
count. Prints one JSON document.

Usage: python bench/sidecar_scale.py [--partitions 4000] [--segments 20] [--segment-kib 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench._machine import machine  # noqa: E402
from bench.offload_pipeline import config_for, pipeline  # noqa: E402
from remote.segments import PartitionDir, PartitionDirWriter, generate_records  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402

MiB = 1024 * 1024
TOPICS = 40
RECORDS_PER_SEGMENT = 10
TARGETS = {
    "first_round_ratio": 0.8,
    "idle_cpu_fraction_of_one_core": 0.01,
    "rss_mib": 300,
    "scrape_ms": 100,
}
RSLOG = "rlmm.offload"


def topic_of(p: int, partitions: int) -> tuple[str, int]:
    """Partition ``p`` of the log dir as (topic, partition): ``TOPICS`` topics."""
    per_topic = max(1, partitions // TOPICS)
    return f"scale-{p // per_topic:02d}", p % per_topic


def write_partition(
    parent: Path, topic: str, partition: int, topic_id: uuid.UUID, segments: int, value: int
) -> None:
    """``segments`` rolled segments of one batch of 10 records, and a full active one."""
    with PartitionDirWriter(
        parent,
        topic,
        partition,
        topic_id=topic_id,
        segment_records=RECORDS_PER_SEGMENT,
        segment_bytes=1 << 30,
    ) as w:
        n = RECORDS_PER_SEGMENT * (segments + 1)
        w.append_records(
            generate_records(n, value_size=value, headers=0), batch_records=RECORDS_PER_SEGMENT
        )


def build(cache: Path, partitions: int, segments: int, segment_kib: int) -> tuple[Path, float]:
    """The log dir (built once per shape, reused after); seconds it took to build."""
    logs = cache / f"logs-{partitions}x{segments}x{segment_kib}k"
    done = logs / ".built"
    if done.exists():
        return logs, float(done.read_text())
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    value = max(1, segment_kib * 1024 // RECORDS_PER_SEGMENT - 40)
    ids: dict[str, uuid.UUID] = {}
    t0 = time.perf_counter()
    for p in range(partitions):
        topic, partition = topic_of(p, partitions)
        topic_id = ids.setdefault(topic, uuid.uuid5(uuid.NAMESPACE_URL, topic))
        write_partition(logs, topic, partition, topic_id, segments, value)
        if p % 500 == 499:
            print(f"built {p + 1}/{partitions} partitions", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    done.write_text(f"{elapsed:.1f}")
    return logs, elapsed


def roll_one_segment(logs: Path, staging: Path, partitions: int, segments: int, kib: int) -> str:
    """Roll a new segment in the log dir's first partition, as a broker does: the same
    partition written with one more segment elsewhere, its new files moved in (the new
    ``.log`` last, so the sidecar never sees a segment without its indexes)."""
    topic, partition = topic_of(0, partitions)
    value = max(1, kib * 1024 // RECORDS_PER_SEGMENT - 40)
    write_partition(
        staging, topic, partition, uuid.uuid5(uuid.NAMESPACE_URL, topic), segments + 1, value
    )
    src, dst = staging / f"{topic}-{partition}", logs / f"{topic}-{partition}"
    changed = [
        f for f in sorted(src.iterdir())
        if not (dst / f.name).exists() or (dst / f.name).read_bytes() != f.read_bytes()
    ]  # fmt: skip
    for f in sorted(changed, key=lambda f: f.suffix == ".log"):
        tmp = dst / f"{f.name}.tmp"
        shutil.copyfile(f, tmp)
        os.replace(tmp, dst / f.name)
    return f"{topic}-{partition}"


class SidecarProcess:
    """``rlmm offload`` over ``logs`` in its own process; its log lines are read on a
    thread, each round's end (the round line) timestamped with the process's CPU time."""

    def __init__(self, config: Path, logs: Path, port: int) -> None:
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "rlmm"),
                "offload",
                "--config",
                str(config),
                "--log-dir",
                str(logs),
                "--metrics-port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.ps = psutil.Process(self.proc.pid)
        self.port = port
        self.rounds: list[dict[str, Any]] = []  # wall time, cpu seconds, the line
        self.copied: list[tuple[float, str]] = []
        self.first_copy: float | None = None
        self.errors: list[str] = []
        self.rss_max = 0
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            now = time.perf_counter()
            if " round " in line and "segments copied" in line:
                entry = {"t": now, "cpu": self.cpu(), "line": line.strip()}
                entry["costs"] = runtime_costs(self.port)
                with self._cond:
                    self.rounds.append(entry)
                    self._cond.notify_all()
            elif "copied " in line and " offsets " in line:
                if self.first_copy is None:
                    self.first_copy = now
                with self._cond:
                    self.copied.append((now, line))
                    self._cond.notify_all()
            elif "ERROR" in line or "Traceback" in line:
                self.errors.append(line.strip())

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.rss_max = max(self.rss_max, self.ps.memory_info().rss)
            except psutil.Error:
                return

    def wait_rounds(self, n: int, timeout_s: float) -> dict[str, Any]:
        with self._cond:
            if not self._cond.wait_for(
                lambda: len(self.rounds) >= n or self.proc.poll() is not None, timeout_s
            ):
                raise SystemExit(f"round {n} did not end within {timeout_s}s")
            if len(self.rounds) < n:
                raise SystemExit(f"sidecar exited {self.proc.returncode}: {self.errors[-5:]}")
            return self.rounds[n - 1]

    def wait_copied(self, name: str, after: float, timeout_s: float) -> float | None:
        with self._cond:
            self._cond.wait_for(
                lambda: any(t > after and f" {name} " in line for t, line in self.copied),
                timeout_s,
            )
            return next((t for t, line in self.copied if t > after and name in line), None)

    def stop(self) -> int:
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)
        self._sampler.join(timeout=10)
        return self.proc.returncode


def busy_round(sidecar: SidecarProcess, work: Path, partitions: int, n: int) -> dict[str, Any]:
    """Right after round ``n``, every partition's active segment changes (its mtime set,
    as an append would: a new change token) and round ``n + 1`` runs them all with
    nothing to copy: what a broker whose every partition takes writes costs per round.
    The mtime is a minute back, so the change is settled."""
    old = time.time_ns() - 60 * 10**9
    for p in range(partitions):
        active = max((work / "{}-{}".format(*topic_of(p, partitions))).glob("*.log"))
        os.utime(active, ns=(old, old))
    prev = sidecar.rounds[n - 1]
    r = sidecar.wait_rounds(n + 1, timeout_s=3600)
    cpu = r["cpu"] - prev["cpu"]
    return {
        "interval_s": round(r["t"] - prev["t"], 2),
        "cpu_s": round(cpu, 3),
        "ms_per_partition": round(1000 * cpu / partitions, 2),
        "housekeeping": cost_delta(prev["costs"], r["costs"]),
        "line": r["line"],
    }


def sidecar_config(tmp: Path, concurrency: int, interval_ms: int, fsync: bool) -> Path:
    """The same settings as the baseline's ``config_for`` (offload_pipeline's), as a file."""
    path = tmp / "offload.toml"
    path.write_text(
        f"""
broker_id = 0
data_dir = "{tmp / "data"}"
[eventlog]
partitions = 8
[remote]
type = "local"
fsync = {str(fsync).lower()}
[offload]
"retention.ms" = -1
"remote.log.manager.task.interval.ms" = {interval_ms}
"remote.log.manager.copier.thread.pool.size" = {concurrency}
"""
    )
    return path


COSTS = (
    "rlmm_python_gc_seconds_total",
    "rlmm_python_gc_timed_collections_total",
    "rlmm_offload_malloc_trim_seconds_total",
    "rlmm_offload_malloc_trims_total",
    "rlmm_python_gc_refreezes_total",
)


def runtime_costs(port: int) -> dict[str, float]:
    """The sidecar's housekeeping counters (rlmm.process.runtime_costs), through a
    ``name[]``-filtered scrape: a full one would cost the sidecar more than an idle round."""
    query = "&".join(f"name[]={n}" for n in COSTS)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            gen = sample.labels.get("generation")
            out[sample.name + (f"{{{gen}}}" if gen is not None else "")] = sample.value
    return out


def cost_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What one interval added to each counter, rounded (ms precision)."""
    return {k: round(v - before.get(k, 0.0), 4) for k, v in after.items()}


def scrape(port: int, times: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/metrics"
    took, size, series = [], 0, 0
    for _ in range(times):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
        took.append((time.perf_counter() - t0) * 1000)
        size = len(body)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {
        "scrapes": times,
        "p50_ms": round(statistics.median(took), 1),
        "max_ms": round(max(took), 1),
        "bytes": size,
        "series": series,
        "meets_target": statistics.median(took) <= TARGETS["scrape_ms"],
    }


def baseline(logs: Path, tmp: Path, partitions: int, concurrency: int, fsync: bool) -> Any:
    """offload_pipeline's pipeline over the log dir's first 16 partitions, same config."""
    pdirs = [PartitionDir(logs / "{}-{}".format(*topic_of(p, partitions))) for p in range(16)]
    config = config_for(tmp / "baseline", {"type": "local", "fsync": fsync}, concurrency)
    elapsed, nbytes, copied, _ = asyncio.run(pipeline(config, pdirs, concurrency))
    shutil.rmtree(tmp / "baseline")
    return {
        "partitions": 16,
        "segments": copied,
        "seconds": round(elapsed, 3),
        "segments_per_s": round(copied / elapsed, 1),
        "mb_s": round(nbytes / elapsed / 1e6, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--segments", type=int, default=20, help="rolled segments per partition")
    parser.add_argument("--segment-kib", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=30000)
    parser.add_argument("--idle-rounds", type=int, default=4)
    parser.add_argument("--no-fsync", action="store_true", help="[remote] fsync = false")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "rlmm-scale")
    args = parser.parse_args()
    fsync = not args.no_fsync
    interval_s = args.interval_ms / 1000
    logs, build_s = build(args.cache, args.partitions, args.segments, args.segment_kib)
    sizes = [f.stat().st_size for f in (logs / "scale-00-0").glob("*.log")]
    out: dict[str, Any] = {
        "benchmark": "sidecar_scale",
        "machine": machine(),
        "load_average": os.getloadavg(),
        "partitions": args.partitions,
        "topics": TOPICS,
        "rolled_segments_per_partition": args.segments,
        "segment_bytes": statistics.median(sizes),
        "log_dir_build_s": round(build_s, 1),
        "concurrency": args.concurrency,
        "task_interval_s": interval_s,
        "remote_fsync": fsync,
        "targets": TARGETS,
    }
    with tempfile.TemporaryDirectory(prefix="rlmm-scale-") as tmp_name:
        tmp = Path(tmp_name)
        out["baseline_offload_pipeline_16"] = base = baseline(
            logs, tmp, args.partitions, args.concurrency, fsync
        )
        work = tmp / "logs"
        # A working copy of one partition's dir is rolled later; the rest are the cache's
        # (the sidecar never writes into a log dir), linked in as a broker's dir would be.
        work.mkdir()
        hot = "{}-{}".format(*topic_of(0, args.partitions))
        for entry in os.scandir(logs):
            if entry.is_dir() and entry.name != hot:
                os.symlink(entry.path, work / entry.name)
        shutil.copytree(logs / hot, work / hot)
        config = sidecar_config(tmp, args.concurrency, args.interval_ms, fsync)
        port = free_port()
        start = time.perf_counter()
        sidecar = SidecarProcess(config, work, port)
        try:
            first = sidecar.wait_rounds(1, timeout_s=3 * 3600)
            copied = args.partitions * args.segments
            round_s = first["t"] - start
            copy_s = first["t"] - (sidecar.first_copy or start)
            nbytes = copied * out["segment_bytes"]
            out["first_round"] = {
                "line": first["line"],
                "seconds_from_start": round(round_s, 1),
                "seconds_from_first_copy": round(copy_s, 1),
                "segments_per_s": round(copied / round_s, 1),
                "segments_per_s_from_first_copy": round(copied / copy_s, 1),
                "mb_s": round(nbytes / round_s / 1e6, 2),
                "cpu_s": round(first["cpu"], 1),
                "housekeeping": cost_delta({}, first["costs"]),
                "ratio_to_baseline": round(copied / round_s / base["segments_per_s"], 3),
                "meets_target": copied / round_s / base["segments_per_s"]
                >= TARGETS["first_round_ratio"],
            }
            idle = []
            for n in range(2, 2 + args.idle_rounds):
                r = sidecar.wait_rounds(n, timeout_s=interval_s * 4 + 600)
                prev = sidecar.rounds[n - 2]
                idle.append({
                    "interval_s": round(r["t"] - prev["t"], 2),
                    "cpu_s": round(r["cpu"] - prev["cpu"], 3),
                    "housekeeping": cost_delta(prev["costs"], r["costs"]),
                    "line": r["line"],
                })  # fmt: skip
            # The round after the first runs every partition once more (the copies
            # changed each one's metadata, so none is idle yet): a busy round, reported
            # as such. The idle figure is the mean over the intervals after it.
            after_first, steady = idle[0], idle[1:] or idle
            cpu = sum(i["cpu_s"] for i in steady)
            seconds = sum(i["interval_s"] for i in steady)
            out["round_after_first"] = {
                **after_first,
                "ms_per_partition": round(1000 * after_first["cpu_s"] / args.partitions, 2),
            }
            out["idle"] = {
                "intervals": steady,
                "cpu_s_per_interval": round(cpu / len(steady), 3),
                "fraction_of_one_core": round(cpu / seconds, 4),
                "max_fraction_of_one_core": max(
                    round(i["cpu_s"] / i["interval_s"], 4) for i in steady
                ),
                "meets_target": cpu / seconds <= TARGETS["idle_cpu_fraction_of_one_core"],
            }
            n = 2 + args.idle_rounds
            rolled_at = time.perf_counter()
            name = roll_one_segment(
                work, tmp / "staging", args.partitions, args.segments, args.segment_kib
            )
            when = sidecar.wait_copied(name, rolled_at, timeout_s=2 * interval_s + 600)
            r = sidecar.wait_rounds(n, timeout_s=interval_s * 4 + 600)
            out["new_segment"] = {
                "partition": name,
                "copied_after_s": None if when is None else round(when - rolled_at, 2),
                "copied_by_next_round": when is not None and when <= r["t"],
                "round_line": r["line"],
                "meets_target": when is not None and when <= r["t"],
            }
            out["busy_round"] = busy_round(sidecar, work, args.partitions, n)
            out["metrics_scrape"] = scrape(port, 5)
        finally:
            code = sidecar.stop()
        out["rss_max_mib"] = round(sidecar.rss_max / MiB, 1)
        out["rss_meets_target"] = sidecar.rss_max / MiB <= TARGETS["rss_mib"]
        out["sidecar_exit"] = code
        out["sidecar_errors"] = sidecar.errors[-5:]
        out["rounds"] = len(sidecar.rounds)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
