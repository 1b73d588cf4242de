"""Run a command of the ``rlmm`` CLI under tracemalloc, dumping where its memory is.

A diagnostic wrapper, not part of the product: ``python bench/_memtrace.py OUT_DIR
rlmm-args...`` runs ``rlmm rlmm-args...`` in this process, and a daemon thread that
starts tracemalloc after ``MEMTRACE_START_S`` seconds (default 20, once the imports
are done: traced, they take minutes) with ``MEMTRACE_FRAMES`` frames (default 25; 0:
no tracing), dumps 30 s later, then every ``MEMTRACE_EVERY_S`` seconds (default 180),
into ``OUT_DIR/<pid>/``: ``snap-NNN.tracemalloc`` (``Snapshot.dump``),
``smaps-NNN.txt`` (``/proc/self/smaps``), ``malloc-info-NNN.xml`` (glibc's
``malloc_info``) and ``stats-NNN.json``: ``/proc/self/status``
and ``smaps_rollup`` figures, tracemalloc's traced bytes, glibc's ``mallinfo2()``,
CPython's object-allocator figures (``sys._debugmallocstats()``, summarised; empty
while tracing), its allocated blocks, the garbage collector's object count and the 40
commonest types. ``bench/soak.py`` runs its sidecar through it when
``SOAK_SIDECAR_WRAP`` names such a prefix. Compare two snapshots with
``bench/_memtrace.py --diff OLD NEW``.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import re
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _mallinfo() -> dict[str, int]:
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {name: getattr(info, name) for name, _ in _Mallinfo2._fields_}


def _malloc_info(path: Path) -> None:
    """glibc's malloc_info(3) XML (per arena: free chunks by size, mmapped, totals)."""
    try:
        libc = ctypes.CDLL(None)
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return
    fp = libc.fopen(str(path).encode(), b"w")
    if fp:
        libc.malloc_info(0, fp)
        libc.fclose(fp)


def _proc(name: str) -> dict[str, int]:
    out = {}
    try:
        text = Path(f"/proc/self/{name}").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+) kB", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def _obmalloc() -> dict[str, Any]:
    """sys._debugmallocstats() (written on the C stderr) captured and summarised."""
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out: dict[str, Any] = {}
    for key, pattern in (
        ("arenas_allocated_total", r"# arenas allocated total\s+=\s+([\d,]+)"),
        ("arenas_reclaimed", r"# arenas reclaimed\s+=\s+([\d,]+)"),
        ("arenas_highwater", r"# arenas highwater mark\s+=\s+([\d,]+)"),
        ("arenas_allocated_current", r"# arenas allocated current\s+=\s+([\d,]+)"),
        ("bytes_in_arenas", r"bytes in allocated blocks\s+=\s+([\d,]+)"),
        ("bytes_available", r"bytes in available blocks\s+=\s+([\d,]+)"),
        ("unused_pools", r"unused pools\s+=\s+([\d,]+)"),
        ("bytes_lost_quantization", r"bytes lost to quantization\s+=\s+([\d,]+)"),
        ("total", r"Total\s+=\s+([\d,]+)"),
    ):
        m = re.search(pattern, text)
        if m:
            out[key] = int(m.group(1).replace(",", ""))
    m = re.search(r"(\d+) arenas \* (\d+) bytes/arena\s+=\s+([\d,]+)", text)
    if m:
        out["arena_bytes"] = int(m.group(3).replace(",", ""))
    return out


def _types() -> dict[str, Any]:
    objects = gc.get_objects()
    counts = collections.Counter(type(o).__name__ for o in objects)
    return {"gc_objects": len(objects), "top_types": counts.most_common(40)}


def _dump(out: Path, n: int) -> None:
    if tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot()
        snap.dump(str(out / f"snap-{n:03d}.tracemalloc"))
        del snap
    traced, peak = tracemalloc.get_traced_memory()
    (out / f"smaps-{n:03d}.txt").write_text(Path("/proc/self/smaps").read_text())
    _malloc_info(out / f"malloc-info-{n:03d}.xml")
    stats = {
        "t": time.time(),
        "n": n,
        "status": _proc("status"),
        "smaps_rollup": _proc("smaps_rollup"),
        "tracemalloc": {
            "traced": traced,
            "peak": peak,
            "overhead": tracemalloc.get_tracemalloc_memory(),
        },
        "mallinfo2": _mallinfo(),
        "obmalloc": _obmalloc(),  # empty under tracemalloc (its hooks hide pymalloc)
        "allocated_blocks": sys.getallocatedblocks(),
        "threads": threading.active_count(),
        **_types(),
    }
    (out / f"stats-{n:03d}.json").write_text(json.dumps(stats, indent=1))


def _dumper(out: Path, every: float, start_s: float, frames: int) -> None:
    # Traced, the sidecar's imports take minutes instead of seconds (2 loaded cores);
    # growth needs only what is allocated later.
    time.sleep(start_s)
    if frames > 0:
        tracemalloc.start(frames)
    n = 0
    while True:
        time.sleep(every if n else min(30.0, every))
        n += 1
        try:
            _dump(out, n)
        except Exception as e:  # a diagnostic must not stop the sidecar
            print(f"memtrace: dump {n} failed: {e!r}", file=sys.stderr)


def _diff(old: str, new: str, top: int = 25) -> None:
    a = tracemalloc.Snapshot.load(old)
    b = tracemalloc.Snapshot.load(new)
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    a, b = a.filter_traces(filters), b.filter_traces(filters)
    for key_type, frames in (("lineno", 1), ("traceback", 12)):
        print(f"=== by {key_type} ===")
        for stat in b.compare_to(a, key_type)[:top]:
            print(
                f"{stat.size_diff / 1024:+10.1f} KiB {stat.count_diff:+8d} blocks"
                f"  (now {stat.size / 1024:.1f} KiB, {stat.count} blocks)"
            )
            for line in stat.traceback.format(limit=frames, most_recent_first=True):
                print("    " + line)
    print(f"total: {sum(s.size for s in a.statistics('filename')) / 2**20:.2f} MiB ->"
          f" {sum(s.size for s in b.statistics('filename')) / 2**20:.2f} MiB")  # fmt: skip


def main() -> None:
    if len(sys.argv) < 3:  # `make bench` runs every bench/*.py: a helper does nothing
        print(__doc__, file=sys.stderr)
        return
    if sys.argv[1] == "--diff":
        _diff(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 25)
        return
    out = Path(sys.argv[1]) / str(os.getpid())
    out.mkdir(parents=True, exist_ok=True)
    # The sidecar caps glibc's arenas at its start; this thread must not take one first.
    from rlmm.process.native_memory import NativeMemory

    NativeMemory().bound()
    frames = int(os.environ.get("MEMTRACE_FRAMES", "25"))
    every = float(os.environ.get("MEMTRACE_EVERY_S", "180"))
    start_s = float(os.environ.get("MEMTRACE_START_S", "20"))
    threading.Thread(
        target=_dumper, args=(out, every, start_s, frames), daemon=True, name="memtrace"
    ).start()
    from rlmm.cli import main as rlmm_main

    sys.argv = ["rlmm", *sys.argv[2:]]
    rlmm_main()


if __name__ == "__main__":
    main()
