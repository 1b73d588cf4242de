"""The bound on native memory (rlmm.process.native_memory): glibc's arenas capped and
its mmap threshold fixed, and nothing done where glibc is not the allocator or the
switch is set (the sidecar's bound at start and trims after each round are checked in
tests/rlmm/offload/test_sidecar_housekeeping.py).

The allocator checks run in a fresh interpreter: mallopt is process-wide, and arenas
already made by the test process's threads would hide what the cap does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlmm.config import load_config
from rlmm.process.native_memory import ARENA_MAX, SWITCH_ENV, NativeMemory, _glibc

ROOT = Path(__file__).resolve().parents[3]
glibc_only = pytest.mark.skipif(_glibc() is None, reason="glibc's malloc is not the allocator")

# 8 threads alive at once, each allocating (so glibc gives each an arena, up to its
# limit); then a 4 MiB block freed and a 2 MiB one taken (under glibc's dynamic
# threshold the 2 MiB block comes from an arena, under a fixed one it is mmapped).
PROBE = r"""
import ctypes, json, re, threading
from rlmm.process.native_memory import NativeMemory
bounded = NativeMemory().bound()
libc = ctypes.CDLL(None)
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    kept = [bytearray(4096) for _ in range(64)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
big = bytearray(4 << 20)
del big
before = libc.mallinfo2().hblks
block = bytearray(2 << 20)
mmapped = libc.mallinfo2().hblks - before
libc.open_memstream.restype = ctypes.c_void_p
libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
libc.malloc_info(0, stream)
libc.fclose(stream)
heaps = len(re.findall(r'<heap nr="', ctypes.string_at(buf, size.value).decode()))
print(json.dumps({"bounded": bounded, "arenas": heaps, "mmapped": mmapped}))
"""


def probe(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items()
             if k not in (SWITCH_ENV, "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


@glibc_only
def test_arenas_capped_and_big_blocks_mapped_on_their_own() -> None:
    bounded = probe()
    assert bounded["bounded"] is True
    assert bounded["arenas"] == ARENA_MAX  # not one per thread
    assert bounded["mmapped"] == 1  # a freed 4 MiB block did not raise the threshold
    # glibc's defaults, for contrast: the same threads get arenas of their own, and the
    # 2 MiB block comes from an arena once a bigger one was freed.
    defaults = probe(**{SWITCH_ENV: "1"})
    assert defaults["bounded"] is False
    assert isinstance(defaults["arenas"], int) and defaults["arenas"] > ARENA_MAX
    assert defaults["mmapped"] == 0


@glibc_only
def test_the_operators_glibc_settings_win() -> None:
    result = probe(MALLOC_ARENA_MAX="4", MALLOC_MMAP_THRESHOLD_=str(8 << 20))
    assert result["bounded"] is False  # nothing of ours was set
    assert result["arenas"] == 4
    assert result["mmapped"] == 0  # 2 MiB is under the operator's 8 MiB threshold


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWITCH_ENV, "1")
    memory = NativeMemory()
    assert not memory.active
    assert memory.bound() is False and memory.trim() is False
    assert memory.trims == 0 and memory.bounded == {}
    # a code-path switch, not a setting: the configuration neither refuses nor reads it
    assert load_config(env={SWITCH_ENV: "1"}).offload == load_config(env={}).offload
