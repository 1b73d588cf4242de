"""Benchmark: the `rlmm offload` sidecar's memory over a long run, with its native-memory
bound (``rlmm.process.native_memory``) and without it.

For each side, a real ``rlmm offload`` process (the CLI, its own process) runs with a
1 s task interval over a log dir of ``--partitions`` partitions into which this script
keeps writing (``PartitionDirWriter``: every codec, records stamped now, segments rolled
by size, old local segments deleted as a broker's local retention would), and copies
to S3: moto's server in a process of its own on loopback, behind the suite's fault
proxy (``--fault-rate``, 0 by default: it then passes every request through), one
bucket per side; ``/metrics`` is scraped every ``--scrape-s``. Remote
retention (``--retention-s``) keeps deleting what it copied, so the sidecar's state is
bounded and any growth is its own; with ``--retention-s -1`` every copy is kept, as the
soak's kept topics are, and the growth per copy (``copy_requests``, from the last
scrape) is what the kept metadata costs. Both sides run at the same time, on the same server.

The baseline is the same process with ``RLMM_NO_NATIVE_MEMORY_BOUND=1`` (glibc's
defaults: one malloc arena per thread up to 8 x cores, no trim).

Every 2 s each sidecar's VmRSS, anonymous memory (``smaps_rollup``), threads and open
fds are read from /proc; the child also writes glibc's ``mallinfo2`` and its arena
count (``malloc_info``) every 10 s from a sampler thread (``--stats``; it starts before
the sidecar, so it has an arena of its own on both sides), with Python's small-object
blocks in use and the collector's generations (objects in each, objects frozen), which
tell objects that pile up from memory the allocators keep. Prints one JSON
document: per side, RSS growth over the last half of the run by least-squares fit
(MiB/h, target <= 5), max RSS, fds and threads (first, last, max, growth per hour).

Usage: python bench/sidecar_memory.py [--minutes 20] [--sides bounded,baseline]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fixtures.ports import free_port  # noqa: E402

MiB = 1024 * 1024
SIDES = ("bounded", "baseline")  # the sidecar as it ships; glibc's defaults
TARGET_MIB_PER_HOUR = 5.0


# --- the child: the real CLI, plus a sampler of glibc's statistics ---------------------


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
              "uordblks", "fordblks", "keepcost")  # fmt: skip


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def glibc_stats(libc: Any) -> dict[str, int]:
    """mallinfo2 (bytes, summed over arenas) and the arena count from malloc_info."""
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    out = {name: int(getattr(info, name)) for name in _MALLINFO2}
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    xml = ctypes.string_at(buf, size.value).decode()
    libc.free(buf)
    out["heaps"] = len(re.findall(r'<heap nr="\d+">', xml))
    return out


def python_stats() -> dict[str, int]:
    """Python's own view: small-object blocks in use, and the collector's generations
    (objects in each, and those frozen), to tell objects that pile up from free space."""
    return {
        "py_blocks": sys.getallocatedblocks(),
        **{f"gc_gen{g}": len(gc.get_objects(g)) for g in range(3)},
        "gc_frozen": gc.get_freeze_count(),
    }


def child(stats_path: Path, cli_args: list[str]) -> None:
    """Run ``rlmm <cli_args>`` in this process; a daemon thread appends glibc's stats."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None

    def sample() -> None:
        while True:
            try:
                row = {"t": time.monotonic(), **glibc_stats(libc), **python_stats()}
            except (AttributeError, OSError):  # not glibc
                return
            with stats_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            time.sleep(10)

    if libc is not None:
        threading.Thread(target=sample, name="bench-malloc-stats", daemon=True).start()
    from rlmm.cli import main as rlmm_main

    sys.argv = ["rlmm", *cli_args]
    rlmm_main()


# --- the parent: S3, the writers, the sampling ------------------------------------------


def proc_sample(pid: int) -> dict[str, int] | None:
    """VmRSS, anonymous bytes, threads and open fds of ``pid`` (None once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None

    def field(text: str, name: str) -> int:
        m = re.search(rf"^{name}:\s+(\d+)", text, re.M)
        return int(m.group(1)) if m else 0

    return {
        "rss": field(status, "VmRSS") * 1024,
        "anon": field(rollup, "Anonymous") * 1024,
        "threads": field(status, "Threads"),
        "fds": fds,
    }


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x (seconds), per hour."""
    if len(points) < 3:
        return None
    xs = [x for x, _ in points]
    mx = sum(xs) / len(xs)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x in xs)
    if den == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / den * 3600


class Writer(threading.Thread):
    """Appends records (stamped now) to ``partitions`` partitions at ``rate`` bytes/s,
    cycling the codecs; keeps the newest ``keep`` rolled segments of each, as a broker's
    local retention would (the sidecar has copied them long before)."""

    def __init__(self, logs: Path, partitions: int, rate: int, segment_bytes: int, keep: int):
        super().__init__(name=f"writer-{logs.parent.name}", daemon=True)
        self.logs, self.rate, self.keep = logs, rate, keep
        self.stop = threading.Event()
        self.error: BaseException | None = None
        from remote.segments import PartitionDirWriter, available_codecs

        codecs = available_codecs()
        self.writers = [
            PartitionDirWriter(
                logs, "memory", p, segment_bytes=segment_bytes, compression=codecs[p % len(codecs)]
            )
            for p in range(partitions)
        ]

    def run(self) -> None:
        from remote.segments import ProducerRecord

        rnd = random.Random(405)
        tick = 0.25
        per_tick = max(1, int(self.rate * tick / len(self.writers) / 600))
        try:
            while not self.stop.wait(tick):
                for w in self.writers:
                    # half random hex, half repeated: compresses about 2x, like real data
                    records = [
                        ProducerRecord(
                            str(rnd.randrange(1000)).encode(),
                            rnd.randbytes(150).hex().encode() + b"v" * 300,
                            (("h", b"1"),),
                        )
                        for _ in range(per_tick)
                    ]
                    w.append_records(records, batch_records=50)
                    self._retain(w.path)
        except BaseException as e:  # said in the report
            self.error = e
        finally:
            for w in self.writers:
                w.close()

    def _retain(self, path: Path) -> None:
        logs = sorted(path.glob("*.log"))
        for old in logs[: max(0, len(logs) - 1 - self.keep)]:
            base = old.stem
            for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
                with contextlib.suppress(FileNotFoundError):
                    (path / f"{base}{suffix}").unlink()


def write_config(side_dir: Path, endpoint: str, bucket: str, args: argparse.Namespace) -> Path:
    path = side_dir / "offload.toml"
    path.write_text(
        f"""
data_dir = "{side_dir / "data"}"
[eventlog]
partitions = 4
fsync = "interval"
[snapshot]
every_events = {args.snapshot_every_events}
interval_s = {args.snapshot_interval_s}
[remote]
type = "s3"
bucket = "{bucket}"
prefix = "bench"
endpoint_url = "{endpoint}"
region = "us-east-1"
[offload]
"retention.ms" = {-1 if args.retention_s < 0 else int(args.retention_s * 1000)}
"remote.log.manager.task.interval.ms" = {args.interval_ms}
"""
    )
    return path


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)


def summarize(rows: list[dict[str, Any]], stats: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    """RSS growth over the last half (fit), max RSS, fds and threads, glibc's stats."""
    if not rows:
        return {"error": "no samples"}
    end = rows[-1]["t"]
    half = [r for r in rows if r["t"] >= t0 + (end - t0) / 2]

    def growth(key: str, scale: float) -> float | None:
        s = slope_per_hour([(r["t"], r[key] / scale) for r in half])
        return None if s is None else round(s, 2)

    def span(key: str, scale: float = 1.0) -> dict[str, float]:
        values = [r[key] / scale for r in rows]
        late = [r[key] / scale for r in half]
        return {
            "max": round(max(values), 1),
            "last": round(values[-1], 1),
            "last_half_min": round(min(late), 1),
            "last_half_max": round(max(late), 1),
        }

    out: dict[str, Any] = {
        "samples": len(rows),
        "seconds": round(end - t0),
        "rss_mib": {**span("rss", MiB), "growth_mib_per_hour_last_half": growth("rss", MiB)},
        "anon_mib": {**span("anon", MiB), "growth_mib_per_hour_last_half": growth("anon", MiB)},
        "fds": {**span("fds"), "growth_per_hour_last_half": growth("fds", 1)},
        "threads": {**span("threads"), "growth_per_hour_last_half": growth("threads", 1)},
    }
    if stats:
        last = stats[-1]
        out["glibc_last"] = {
            "arenas": last["heaps"],
            "in_use_mib": round(last["uordblks"] / MiB, 1),
            "free_in_arenas_mib": round(last["fordblks"] / MiB, 1),
            "arena_bytes_mib": round(last["arena"] / MiB, 1),
            "mmapped_mib": round(last["hblkhd"] / MiB, 1),
        }
        half_stats = [s for s in stats if s["t"] >= stats[0]["t"] + (last["t"] - stats[0]["t"]) / 2]
        for key, name in (("fordblks", "free_in_arenas"), ("uordblks", "in_use")):
            s = slope_per_hour([(r["t"], r[key] / MiB) for r in half_stats])
            out["glibc_last"][f"{name}_growth_mib_per_hour_last_half"] = (
                None if s is None else round(s, 2)
            )
        if "py_blocks" in last:
            out["python"] = {
                key: {
                    "first": stats[0][key],
                    "last": last[key],
                    "growth_per_hour_last_half": _rounded(
                        slope_per_hour([(r["t"], r[key]) for r in half_stats])
                    ),
                }
                for key in ("py_blocks", "gc_gen0", "gc_gen1", "gc_gen2", "gc_frozen")
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--sides", default=",".join(SIDES), help="bounded,baseline or one of them")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rate-kib", type=int, default=512, help="bytes written per side, KiB/s")
    parser.add_argument("--segment-kib", type=int, default=512)
    parser.add_argument("--keep-local", type=int, default=20, help="rolled segments kept locally")
    parser.add_argument(
        "--retention-s", type=float, default=120.0,
        help="remote retention.ms / 1000 (-1: keep every copy, so the archive grows)",
    )  # fmt: skip
    parser.add_argument(
        "--snapshot-every-events", type=int, default=100_000,
        help="[snapshot] every_events (the soak's: 2000)",
    )  # fmt: skip
    parser.add_argument(
        "--snapshot-interval-s", type=float, default=300.0,
        help="[snapshot] interval_s (the soak's: 30)",
    )  # fmt: skip
    parser.add_argument("--interval-ms", type=int, default=1000, help="task interval")
    parser.add_argument(
        "--scrape-s",
        type=float,
        default=2.0,
        help="GET /metrics every this often, as Prometheus would (0: never)",
    )
    parser.add_argument(
        "--memray",
        type=Path,
        help="run the baseline under memray --native"
        " --aggregate, writing this capture file (investigation)",
    )
    parser.add_argument(
        "--fault-rate", type=float, default=0.0,
        help="share of S3 requests failed by the fault proxy (the soak's is 0.03)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work dir (samples, logs)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        child(args.stats, rest[1:] if rest[:1] == ["--"] else rest)
        return
    sides = [s for s in args.sides.split(",") if s]
    if any(s not in SIDES for s in sides):
        parser.error(f"--sides: one or more of {SIDES}")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    import boto3

    from tests.fixtures.s3_faults import faulty_s3

    work = Path(tempfile.mkdtemp(prefix="rlmm-sidecar-memory-"))
    stack = contextlib.ExitStack()
    s3_procs = stack.enter_context(faulty_s3(work / "s3", rate=args.fault_rate, seed=405))
    endpoint = s3_procs.url
    writers: list[Writer] = []
    procs: dict[str, subprocess.Popen[bytes]] = {}
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    exits: dict[str, int | None] = {}
    ports: dict[str, int] = {}
    scrapes: dict[str, int] = {s: 0 for s in sides}
    t0 = time.monotonic()
    try:
        s3 = boto3.client("s3", endpoint_url=s3_procs.moto_url, region_name="us-east-1")
        for side in sides:
            side_dir = work / side
            logs = side_dir / "kafka-logs"
            logs.mkdir(parents=True)
            s3.create_bucket(Bucket=f"memory-{side}")
            config = write_config(side_dir, endpoint, f"memory-{side}", args)
            writer = Writer(
                logs, args.partitions, args.rate_kib * 1024, args.segment_kib * 1024,
                args.keep_local,
            )  # fmt: skip
            writer.start()
            writers.append(writer)
            side_env = dict(env)
            if side == "baseline":
                side_env["RLMM_NO_NATIVE_MEMORY_BOUND"] = "1"
            else:
                side_env.pop("RLMM_NO_NATIVE_MEMORY_BOUND", None)
            ports[side] = free_port()
            with (side_dir / "sidecar.log").open("wb") as err:
                wrap = (
                    [
                        sys.executable,
                        "-m",
                        "memray",
                        "run",
                        "--native",
                        "--aggregate",
                        "-q",
                        "-o",
                        str(args.memray),
                    ]
                    if args.memray is not None and side == "baseline"
                    else [sys.executable]
                )
                procs[side] = subprocess.Popen(
                    [*wrap, __file__, "--child", "--stats", str(side_dir / "glibc.jsonl"),
                     "--", "offload", "--config", str(config), "--log-dir", str(logs),
                     "--metrics-port", str(ports[side])],
                    env=side_env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                )  # fmt: skip
        t0 = time.monotonic()
        deadline = t0 + args.minutes * 60
        next_sample = t0
        while time.monotonic() < deadline:
            if time.monotonic() >= next_sample:
                next_sample += 2
                for side, proc in procs.items():
                    row = proc_sample(proc.pid) if proc.poll() is None else None
                    if row is not None:
                        samples[side].append({"t": time.monotonic(), **row})
            if all(p.poll() is not None for p in procs.values()):
                break
            if args.scrape_s > 0:
                for side, port in ports.items():
                    with contextlib.suppress(OSError):
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                        scrapes[side] += 1
                time.sleep(args.scrape_s)
            else:
                time.sleep(2)
    finally:
        copied: dict[str, int | None] = {}
        for side, port in ports.items():  # the last word on what each side archived
            copied[side] = None
            with contextlib.suppress(OSError, ValueError):
                url = f"http://127.0.0.1:{port}/metrics"
                text = urllib.request.urlopen(url, timeout=30).read().decode()
                copied[side] = round(sum(
                    float(m.group(1)) for m in re.finditer(
                        r"^rlmm_remote_copy_requests_total\{.*\} (\S+)$", text, re.M)
                ))  # fmt: skip
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for side, proc in procs.items():
            try:
                exits[side] = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                exits[side] = proc.wait()
        for writer in writers:
            writer.stop.set()
        for writer in writers:
            writer.join(timeout=60)
        faults = s3_procs.faults()
        stack.close()  # moto and the proxy killed
    sides_out: dict[str, Any] = {}
    for side in sides:
        stats_path = work / side / "glibc.jsonl"
        stats = [json.loads(line) for line in stats_path.read_text().splitlines()] if (
            stats_path.exists()) else []  # fmt: skip
        data_log = (work / side / "sidecar.log").read_text(errors="replace")
        sides_out[side] = {
            "exit_code": exits.get(side),
            "metrics_scrapes": scrapes[side],
            "copy_requests": copied.get(side),
            "stderr_tail": data_log.strip().splitlines()[-3:],
            **summarize(samples[side], stats, t0),
        }
    if args.keep:
        for side in sides:
            (work / side / "samples.json").write_text(json.dumps(samples[side]))
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    from bench._machine import machine

    report = {
        "benchmark": "sidecar_memory",
        "machine": machine(),
        "params": {
            "minutes": args.minutes,
            "partitions": args.partitions,
            "rate_kib_per_s": args.rate_kib,
            "segment_kib": args.segment_kib,
            "task_interval_ms": args.interval_ms,
            "remote_retention_s": args.retention_s,
            "snapshot_every_events": args.snapshot_every_events,
            "snapshot_interval_s": args.snapshot_interval_s,
            "scrape_every_s": args.scrape_s,
            "s3": "moto server behind the fault proxy (tests/fixtures/s3_faults.py),"
            " each its own process, 127.0.0.1",
            "fault_rate": args.fault_rate,
            "baseline": "RLMM_NO_NATIVE_MEMORY_BOUND=1 (glibc defaults)",
        },
        "target_rss_growth_mib_per_hour_max": TARGET_MIB_PER_HOUR,
        "s3_requests": faults.get("requests"),
        "s3_faults_injected": faults.get("counts"),
        "writer_errors": [repr(w.error) for w in writers if w.error is not None],
        "sides": sides_out,
        "work_dir": str(work) if args.keep else None,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
