"""Progress of the sidecar: a rich progress bar on a terminal, plain log lines otherwise.

Invariant: a display only renders what the RemoteLogManager reports (OffloadEvent);
it never changes what is copied, and ``close()`` is idempotent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from rlmm.offload.segment_ops import OffloadEvent

log = logging.getLogger("rlmm.offload")
# Error messages a Tally keeps (the newest): a sidecar running for months under
# failing storage must not keep one string per failure; the count is kept whole.
KEPT_ERRORS = 100


class Tally:
    """Counts of one run: segments and bytes copied and deleted, errors (all counted in
    ``error_count``, the newest KEPT_ERRORS messages kept in ``errors``), and the time
    some copy was in flight (the rate is over that time, not over idle rounds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.copying = 0  # copies in flight
        self._copying_since: float | None = None  # when the in-flight count left 0
        self._copied_s = 0.0  # the time some copy was in flight, before that
        self.copied = 0
        self.copied_bytes = 0
        self.deleted = 0
        self.deleted_bytes = 0
        self.skipped_expired = 0
        self.offsets_missed = 0
        self.errors: list[str] = []
        self.error_count = 0

    def add(self, event: OffloadEvent) -> None:
        if event.kind == "copy_started":
            if self.copying == 0:
                self._copying_since = self._clock()
            self.copying += 1
        elif event.kind == "copy_ended":
            self.copying = max(0, self.copying - 1)
            if self.copying == 0 and self._copying_since is not None:
                self._copied_s += self._clock() - self._copying_since
                self._copying_since = None
        elif event.kind == "copied":
            self.copied += 1
            self.copied_bytes += event.size_in_bytes
        elif event.kind == "deleted":
            self.deleted += 1
            self.deleted_bytes += event.size_in_bytes
        elif event.kind == "skipped":
            self.skipped_expired += 1
        elif event.kind == "missed":
            self.offsets_missed += event.offsets
        elif event.error is not None:
            self.add_error(event.error)

    def add_error(self, message: str) -> None:
        self.error_count += 1
        self.errors.append(message)
        del self.errors[:-KEPT_ERRORS]

    def copying_seconds(self) -> float:
        """How long some copy was in flight (copies at once count once)."""
        since = self._copying_since
        return self._copied_s + (0.0 if since is None else self._clock() - since)

    def rate(self) -> float:
        """Bytes copied per second spent copying."""
        return self.copied_bytes / max(self.copying_seconds(), 1e-9)


def not_copied(skipped_expired: int, offsets_missed: int) -> str:
    """What a summary line adds about segments not copied: past retention already, and
    offsets the broker deleted before their copy ("" when neither)."""
    return (
        f", {skipped_expired} not copied (past retention.ms already)" if skipped_expired else ""
    ) + (
        f", {offsets_missed} offsets deleted locally before they were copied"
        if offsets_missed
        else ""
    )


class Display:
    """Renders OffloadEvents; ``rich`` on a terminal, log lines elsewhere."""

    def __init__(
        self,
        *,
        rich: bool | None = None,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.rich = self.console.is_terminal if rich is None else rich
        self.tally = Tally(clock)
        self.rounds = 0
        self._last = (0, 0, 0, 0, 0, 0)  # the tally at the end of the previous round
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if self.rich:
            self._progress = Progress(
                TextColumn("[bold]offload[/] {task.fields[segments]} segments"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self._task = self._progress.add_task("copy", total=None, segments=0)
            self._progress.start()

    def event(self, event: OffloadEvent) -> None:
        self.tally.add(event)
        if event.kind in ("copy_started", "copy_ended"):
            return  # the tally's clock only: the copy's line comes with "copied"
        m = event.segment
        if self._progress is not None and self._task is not None:
            self._progress.update(
                self._task, completed=self.tally.copied_bytes, segments=self.tally.copied
            )
            if event.kind == "failed":
                self._progress.console.print(f"[red]error:[/] {event.error}")
            return
        if event.kind == "failed":
            log.error("%s", event.error)
        elif m is not None:
            log.info(
                "%s %s offsets %d..%d (%d bytes; %d segments, %.1f MB/s while copying)",
                event.kind,
                m.topic_id_partition,
                m.start_offset,
                m.end_offset,
                event.size_in_bytes,
                self.tally.copied,
                self.tally.rate() / 1e6,
            )

    def round_done(self, partitions: int, led: int | None = None) -> None:
        """One line: what this round did, then the totals since start apart."""
        t = self.tally
        now = (t.copied, t.copied_bytes, t.deleted, t.error_count, t.skipped_expired,
               t.offsets_missed)  # fmt: skip
        deltas = (a - b for a, b in zip(now, self._last, strict=True))
        copied, nbytes, deleted, errors, skipped, missed = deltas
        self._last = now
        self.rounds += 1
        over = f"{partitions} partitions" + (f" ({led} led)" if led is not None else "")
        message = (
            f"round {self.rounds} over {over}: {copied} segments copied ({nbytes} bytes),"
            f" {deleted} deleted, {errors} errors"
            + not_copied(skipped, missed)
            + f"; since start: {t.copied} copied ({t.copied_bytes} bytes), {t.deleted} deleted,"
            f" {t.error_count} errors"
        )
        if self._progress is not None:
            self._progress.console.print(message)
        else:
            log.info("%s", message)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


__all__ = ["KEPT_ERRORS", "Display", "Tally", "not_copied"]
