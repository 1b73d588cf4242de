"""How the CLI writes sizes, times and ages for people: one form everywhere (1.5 MiB,
2026-11-29 05:30:00Z, 3h 12m; "-" for an unknown value). Pure functions, no state."""

from __future__ import annotations

from datetime import UTC, datetime


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def human_age(seconds: float | None) -> str:
    """42 -> 42s, 750 -> 12m 30s, 11520 -> 3h 12m, 532800 -> 6d 4h (None: -)."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 0:
        return f"-{human_age(-s)}"
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                     ("m", 60, "s", 1)):  # fmt: skip
        if s >= size:
            rest = (s % size) // subsize
            return f"{s // size}{unit}" + (f" {rest}{sub}" if rest else "")
    return f"{s}s"
