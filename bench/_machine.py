"""Machine description shared by the benchmark scripts (JSON-ready)."""

from __future__ import annotations

import os
import platform
import sys


def machine() -> dict[str, object]:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
