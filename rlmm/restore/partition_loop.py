"""The restore's per-partition loop: source partitions read a few at a time, one writer.

Job: start a reader for up to ``partitions_in_flight`` source partitions of the plan
at once, each reading its steps (``rlmm.restore.source``) in a thread of its own, and
hand every step, in its partition's order, to the one ``TransactionWriter``; keep each
partition's ``PartitionResult`` (in the report) and tell the progress callback when a
partition starts and whenever a commit moves it.

Invariants: one task alone (this loop) gives steps to the writer, in each partition's
order, so a transaction holds whatever partitions' records arrived while it was open;
a partition's offsets after its last record (aborted ones, markers) count as done; the
loop ends with the open transaction committed, or by an error after cancelling every
reader and shutting their threads down (a reader's generator is closed once its
thread has left it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from aiokafka.errors import KafkaError

from rlmm.restore.errors import TargetClusterError
from rlmm.restore.plan import IDENTITY, PartitionPlan
from rlmm.restore.progress import Progress
from rlmm.restore.report import PartitionResult, ProgressCallback, RestoreOptions, RestoreReport
from rlmm.restore.source import Passthrough, SliceEnd, Step, partition_steps
from rlmm.restore.transaction import TransactionWriter

# A reader's hand-over: a list of steps, None at the partition's end, or its error.
_Item = tuple[PartitionPlan, list[Step] | Exception | None]


class PartitionLoop:
    """One run's source partitions through its ``TransactionWriter``."""

    def __init__(
        self,
        report: RestoreReport,
        client: dict[str, Any],
        options: RestoreOptions,
        saved: Mapping[int, Progress],
        on_progress: ProgressCallback | None,
        max_bytes: int,
        map_partitions: int,
    ) -> None:
        self.report = report
        self.plan = report.plan
        self.options = options
        self.saved = saved
        self.on_progress = on_progress
        self.max_bytes = max_bytes
        self.writer = TransactionWriter(
            report, client, options, max_bytes, self.report_progress, map_partitions
        )

    async def run(self) -> None:
        async with self.writer:
            try:
                await self.writer.clear_void()
                await self._partitions()
            except KafkaError as e:
                raise TargetClusterError(f"restoring into {self.plan.target_topic!r}: {e}") from e

    async def _partitions(self) -> None:
        in_flight = max(1, self.options.partitions_in_flight)
        queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=2 * in_flight)
        results: dict[int, PartitionResult] = {}
        for p in self.plan.partitions:
            previous = self.saved.get(p.source.partition)
            results[p.source.partition] = PartitionResult(
                p.source.partition, p.start_offset, p.start_offset, p.end_offset,
                records_total=previous.records if previous is not None else 0,
            )  # fmt: skip
        self.report.results = list(results.values())
        todo = [p for p in self.plan.partitions if p.start_offset < p.run_end]
        live: set[int] = set()
        readers: set[asyncio.Task[None]] = set()
        executor = ThreadPoolExecutor(in_flight, thread_name_prefix="rlmm-restore-read")

        def start_readers() -> None:
            while todo and len(live) < in_flight:
                p = todo.pop(0)
                live.add(p.source.partition)
                self.report_progress(p, results[p.source.partition])
                task = asyncio.create_task(self._read(p, queue, executor))
                readers.add(task)
                task.add_done_callback(readers.discard)

        try:
            start_readers()
            while live:
                p, item = await queue.get()
                result = results[p.source.partition]
                if isinstance(item, Exception):
                    raise item
                if item is None:
                    live.discard(p.source.partition)
                    # Offsets after the last record (aborted ones, markers) are done.
                    await self.writer.moved(p, result, p.run_end)
                    start_readers()
                    continue
                for step in item:
                    await self._step(p, result, step)
            await self.writer.finish()
        finally:
            for task in list(readers):
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            executor.shutdown(wait=True)

    async def _read(
        self, p: PartitionPlan, queue: asyncio.Queue[_Item], executor: ThreadPoolExecutor
    ) -> None:
        """Hand the partition's steps to the writer: lists of them, then None (or the
        error that stopped the reading)."""
        identity = self.plan.selection.partitioner == IDENTITY
        stream = partition_steps(
            p, passthrough=identity and self.options.passthrough, max_bytes=self.max_bytes
        )
        running: Future[list[Step] | None] | None = None
        try:
            while True:
                # Fetching and decoding block: off the loop, so the producer's sender
                # keeps sending meanwhile.
                running = executor.submit(next, stream, None)
                steps = await asyncio.wrap_future(running)
                running = None
                if steps is None:
                    break
                await queue.put((p, steps))
            await queue.put((p, None))
        except Exception as e:
            await queue.put((p, e))
        finally:
            if running is not None and not running.done():
                # The generator cannot be closed while its thread runs it.
                await asyncio.wait([asyncio.wrap_future(running)])
            stream.close()

    async def _step(self, p: PartitionPlan, result: PartitionResult, step: Step) -> None:
        if isinstance(step, SliceEnd):
            result.bytes_read += step.size_in_bytes
            # Offsets after the slice's last record (aborted ones, markers) are done.
            await self.writer.moved(p, result, step.until_offset)
        elif isinstance(step, Passthrough):
            await self.writer.passthrough(p, result, step)
        else:
            result.batches_reencoded += sum(step.reasons.values())
            result.reencoded.update(step.reasons)
            await self.writer.rows(p, result, step.rows)

    def report_progress(self, p: PartitionPlan, result: PartitionResult) -> None:
        """Tell the progress callback where ``p`` stands."""
        if self.on_progress is not None:
            total = max(1, p.run_end - p.start_offset)
            done = min(total, result.next_offset - result.start_offset)
            self.on_progress(result.partition, done, total, result.records, result.bytes_read)


__all__ = ["PartitionLoop"]
