"""The offset map of a restore: where each source offset went in the target, in runs.

A restore does not keep offsets: the source's transaction markers and aborted records
are not written again, and the restore's own commits add markers of their own, so a
record's offset in the target differs from its offset in the source. The map says where
each restored record went, per source partition, at batch granularity, so that a
consumer group's committed source offsets can be moved to the target.

Format: records of the compacted topic ``__rlmm_restore_offsets`` of the target cluster
(``--offsets-topic``), written in the transaction of the data they describe, one per
source partition and transaction (more when it holds over ``MAX_RUNS_PER_RECORD``)::

    key   dr:0:3000        (<target topic>:<source partition>:<first source offset>)
    value {"runs": [[3000, 3999, 3007, 1000], [4010, 4999, 5008, 990]],
           "source_partition": 0, "source_topic": "dr", "target_partition": 0,
           "target_topic": "dr", "topic_id": "M4HtdF9vRx6hcoUD_QN_cA", "version": 1}

A run ``[first_source, last_source, first_target, records]`` says that ``records``
records with source offsets in ``[first_source, last_source]`` went, in order, to target
offsets ``first_target .. first_target + records - 1``. A *dense* run
(``records == last_source - first_source + 1``) maps source offset ``first_source + i``
to ``first_target + i`` exactly. A run breaks wherever either side has a gap (a source
transaction marker, aborted records, a compacted hole; a commit marker of the restore),
so an archived batch passed through is inside one dense run and consecutive ones
merge: the map grows with the gaps and the transactions, not with the records. Only a
batch the restore re-encoded whose records have more than ``MAX_RUNS_PER_BATCH`` gaps
between them gets a *sparse* run for the rest; an offset inside it translates to the
run's first target offset (its records are read again: at least once, never skipped).

Invariants: runs of one source partition do not overlap and ascend in both offsets; a
map record commits with the data it describes or not at all (a run killed and resumed
leaves the committed map exactly matching the committed data); ``translate`` gives, for
a committed source offset C (the next record to read), the target offset of the first
restored record whose source offset is C or above.
"""

from __future__ import annotations

import bisect
import itertools
import json
from asyncio import Future
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokafka.structs import RecordMetadata

from rlmm.restore.errors import RestoreError
from rlmm.topics import RESTORE_OFFSETS_TOPIC

OFFSETS_TOPIC = RESTORE_OFFSETS_TOPIC  # the sidecar skips it (rlmm.topics)
VERSION = 1
MAX_RUNS_PER_BATCH = 64  # runs of one re-encoded batch before the rest is one sparse run
MAX_RUNS_PER_RECORD = 2_000  # about 80 KB of JSON: far below any max.message.bytes


class Run(NamedTuple):
    """``records`` records of source offsets ``[first_source, last_source]``, in order,
    at target offsets ``first_target ..``."""

    first_source: int
    last_source: int
    first_target: int
    records: int

    @property
    def dense(self) -> bool:
        return self.records == self.last_source - self.first_source + 1

    @property
    def end_target(self) -> int:
        """The target offset after the run's last record."""
        return self.first_target + self.records


def map_key(target_topic: str, source_partition: int, first_source: int) -> bytes:
    return f"{target_topic}:{source_partition}:{first_source}".encode()


def map_prefix(target_topic: str) -> bytes:
    """Every key of ``target_topic``'s map starts so (topic names hold no ``:``)."""
    return f"{target_topic}:".encode()


def coalesce(runs: Sequence[Run]) -> list[Run]:
    """``runs`` in source order, each dense run merged into the one before it when both
    sides follow on (no gap in the source, none in the target)."""
    out: list[Run] = []
    for run in sorted(runs):
        last = out[-1] if out else None
        if (
            last is not None
            and last.dense
            and run.dense
            and run.first_source == last.last_source + 1
            and run.first_target == last.end_target
        ):
            out[-1] = Run(last.first_source, run.last_source, last.first_target,
                          last.records + run.records)  # fmt: skip
        else:
            out.append(run)
    return out


@dataclass(frozen=True)
class MapRecord:
    """One record of the map: some runs of one source partition."""

    target_topic: str
    source_topic: str
    topic_id: str
    source_partition: int
    target_partition: int
    runs: tuple[Run, ...]

    @property
    def key(self) -> bytes:
        return map_key(self.target_topic, self.source_partition, self.runs[0].first_source)

    def value(self) -> bytes:
        return json.dumps(
            {
                "version": VERSION,
                "source_topic": self.source_topic,
                "topic_id": self.topic_id,
                "target_topic": self.target_topic,
                "source_partition": self.source_partition,
                "target_partition": self.target_partition,
                "runs": [list(r) for r in self.runs],
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> MapRecord:
        where = f"offset map record {key[:200]!r}"
        try:
            fields = json.loads(value)
            version = fields["version"]
        except (ValueError, KeyError, TypeError) as e:
            raise RestoreError(f"unreadable {where}: {e}") from e
        if version != VERSION:
            raise RestoreError(
                f"{where} is of version {version!r}: this rlmm reads version {VERSION} (a"
                " newer rlmm wrote it?)"
            )
        try:
            runs = tuple(Run(*(int(n) for n in r)) for r in fields["runs"])
            found = cls(
                str(fields["target_topic"]),
                str(fields["source_topic"]),
                str(fields["topic_id"]),
                int(fields["source_partition"]),
                int(fields["target_partition"]),
                runs,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise RestoreError(f"unreadable {where}: {e}") from e
        if not runs or any(r.records < 1 or r.last_source < r.first_source for r in runs):
            raise RestoreError(f"{where} holds no run, or a run that is not one")
        return found


# --- the writer's side --------------------------------------------------------------


class MapBuilder:
    """The runs of one restore's open transaction, from what its writer sends.

    A batch passed through is one dense run (``batch``); a batch the writer builds holds
    runs by its records' positions (``row``), placed once it is sent (``sent``). The
    target offsets are the sends' base offsets: ``records`` reads them once every send
    of the transaction is acknowledged, just before the commit."""

    def __init__(self, target_topic: str, source_topic: str, topic_id: str) -> None:
        self.target_topic = target_topic
        self.source_topic = source_topic
        self.topic_id = topic_id
        # target partition -> runs of its open batch, as [first, last, index, records]
        self._open: dict[int, list[list[int]]] = {}
        self._rows: dict[int, int] = {}  # target partition -> records in its open batch
        # (source partition, the send's future, runs relative to the batch's first offset)
        self._sent: list[tuple[int, Future[RecordMetadata], list[list[int]]]] = []

    def batch(
        self, partition: int, future: Future[RecordMetadata], first: int, last: int, records: int
    ) -> None:
        """An archived batch (offsets ``first`` to ``last``, no gap) sent whole."""
        self._sent.append((partition, future, [[first, last, 0, records]]))

    def row(self, partition: int, offset: int) -> None:
        """A record of source offset ``offset`` appended to ``partition``'s open batch."""
        runs = self._open.setdefault(partition, [])
        index = self._rows.get(partition, 0)
        self._rows[partition] = index + 1
        last = runs[-1] if runs else None
        if last is not None and offset == last[1] + 1 and last[3] == last[1] - last[0] + 1:
            last[1], last[3] = offset, last[3] + 1
        elif last is None or len(runs) < MAX_RUNS_PER_BATCH:
            runs.append([offset, offset, index, 1])
        else:  # sparse from here: an offset inside reads the run again
            last[1], last[3] = offset, last[3] + 1

    def sent(self, partition: int, future: Future[RecordMetadata]) -> None:
        """``partition``'s open batch was sent (``future``: its RecordMetadata)."""
        runs = self._open.pop(partition, None)
        self._rows.pop(partition, None)
        if runs:
            self._sent.append((partition, future, runs))

    def records(self) -> Iterator[MapRecord]:
        """The transaction's map records (every send acknowledged); empties the builder."""
        by_partition: dict[int, list[Run]] = {}
        for partition, future, runs in self._sent:
            base = int(future.result().offset)
            by_partition.setdefault(partition, []).extend(
                Run(first, last, base + index, records) for first, last, index, records in runs
            )
        self._sent.clear()
        for partition, placed in sorted(by_partition.items()):
            merged = coalesce(placed)
            for i in range(0, len(merged), MAX_RUNS_PER_RECORD):
                yield MapRecord(
                    self.target_topic, self.source_topic, self.topic_id, partition, partition,
                    tuple(merged[i : i + MAX_RUNS_PER_RECORD]),
                )  # fmt: skip


# --- the reader's side --------------------------------------------------------------


@dataclass(frozen=True)
class Translation:
    """Where a consumer at ``source_offset`` of ``partition`` goes on in the target."""

    source_topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_partition: int
    target_offset: int | None  # None: the map does not reach it (the restore not done)
    exact: bool  # False: a sparse run, or outside what was restored (see ``note``)
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_topic": self.source_topic,
            "partition": self.partition,
            "source_offset": self.source_offset,
            "target_topic": self.target_topic,
            "target_partition": self.target_partition,
            "target_offset": self.target_offset,
            "exact": self.exact,
            "note": self.note,
        }


@dataclass(frozen=True)
class OffsetMap:
    """The committed map of one target topic: runs per source partition."""

    target_topic: str
    source_topic: str | None  # None: no map record of the target
    topic_id: str | None
    runs: Mapping[int, Sequence[Run]] = field(default_factory=dict)

    @classmethod
    def from_records(cls, target_topic: str, records: Sequence[MapRecord]) -> OffsetMap:
        """The map of ``records`` (one target's); RestoreError for two sources in one
        target, or runs that overlap."""
        sources = {(r.source_topic, r.topic_id) for r in records}
        if len(sources) > 1:
            shown = ", ".join(f"{t} (topic id {i})" for t, i in sorted(sources))
            raise RestoreError(
                f"the offset map of {target_topic!r} holds runs of several sources ({shown}):"
                " it was written by restores that did not clear it; restore again"
            )
        by_partition: dict[int, list[Run]] = {}
        for r in records:
            by_partition.setdefault(r.source_partition, []).extend(r.runs)
        runs = {p: coalesce(found) for p, found in by_partition.items()}
        for p, found in runs.items():
            for before, after in itertools.pairwise(found):
                if (
                    after.first_source <= before.last_source
                    or after.first_target < before.end_target
                ):
                    raise RestoreError(
                        f"the offset map of {target_topic!r} partition {p} has overlapping"
                        f" runs {list(before)} and {list(after)}"
                    )
        source_topic, topic_id = next(iter(sources)) if sources else (None, None)
        return cls(target_topic, source_topic, topic_id, runs)

    def translate(
        self,
        partition: int,
        offset: int,
        *,
        first_offset: int | None = None,
        end_offset: int | None = None,
        done: bool = True,
    ) -> Translation:
        """Where a consumer whose next source offset is ``offset`` goes on in the target
        (``first_offset``/``end_offset``: the restored range of ``partition``; ``done``:
        its restore is complete, so nothing will be mapped after its last run)."""
        runs = list(self.runs.get(partition, ()))
        source = self.source_topic or "?"

        def out(target: int | None, exact: bool, note: str) -> Translation:
            return Translation(source, partition, offset, self.target_topic, partition,
                               target, exact, note)  # fmt: skip

        if not runs:
            return out(None, False, "no record of this partition was restored")
        i = bisect.bisect_left([r.last_source for r in runs], offset)
        if i == len(runs):
            if not done:
                return out(None, False, "beyond what the restore has committed so far: run it"
                           " to the end first")  # fmt: skip
            if end_offset is not None and offset > end_offset:
                return out(runs[-1].end_target, False, f"after the restored range (it ended"
                           f" at {end_offset}): the records up to {offset} are not in the"
                           " target")  # fmt: skip
            return out(runs[-1].end_target, True, "after the last restored record")
        run = runs[i]
        if offset <= run.first_source:
            if i == 0 and first_offset is not None and offset < first_offset:
                note = f"before the restored range (it began at {first_offset}): the records"
                return out(run.first_target, False, f"{note} before it are not in the target")
            return out(run.first_target, True, "exact")
        if run.dense:
            return out(run.first_target + offset - run.first_source, True, "exact")
        return out(run.first_target, False, f"inside a re-encoded batch with offset gaps: up"
                   f" to {run.records} records read again")  # fmt: skip


def reset_csv(translations: Sequence[Translation]) -> str:
    """The file ``kafka-consumer-groups --reset-offsets --from-file`` takes for one group:
    ``topic,partition,offset`` lines (the target's), the untranslated left out."""
    return "".join(
        f"{t.target_topic},{t.target_partition},{t.target_offset}\n"
        for t in translations
        if t.target_offset is not None
    )


def parse_offsets_csv(text: str, topic: str, where: str) -> list[tuple[int, int]]:
    """(partition, offset) of ``topic`` in Kafka's offsets CSV (``kafka-consumer-groups
    --reset-offsets --export``: ``topic,partition,offset``, or with the group first);
    lines of other topics are left out. RestoreError naming the line otherwise."""
    out: list[tuple[int, int]] = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = [f.strip() for f in line.split(",")]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(fields) not in (3, 4):
            raise RestoreError(
                f"{where} line {n}: {line!r} is not topic,partition,offset (nor"
                " group,topic,partition,offset)"
            )
        name, partition, offset = fields[-3:]
        if name != topic:
            continue
        try:
            out.append((int(partition), int(offset)))
        except ValueError:
            raise RestoreError(
                f"{where} line {n}: partition {partition!r} and offset {offset!r} are not numbers"
            ) from None
    return out


__all__ = [
    "MAX_RUNS_PER_BATCH",
    "MAX_RUNS_PER_RECORD",
    "OFFSETS_TOPIC",
    "MapBuilder",
    "MapRecord",
    "OffsetMap",
    "Run",
    "Translation",
    "coalesce",
    "map_key",
    "map_prefix",
    "parse_offsets_csv",
    "reset_csv",
]
