"""RowBounds: what a query's filter lets through, as bounds on Spark's Kafka columns.

Job: collect the simple comparisons a query applies to ``topic``, ``partition``,
``offset`` and ``timestamp`` (=, <, <=, >, >=, IN, all ANDed) into one small
picklable value the planner prunes with (partitions, segments, the start of a
slice) and the reader filters rows with. Timestamps arrive as Spark's microseconds
(an aware ``datetime``) and are kept as Kafka's milliseconds, rounded so that a
millisecond record passes the bounds exactly when its microsecond value passes the
comparison.

Invariant: the bounds are a superset of what the comparisons keep: a row outside
them fails at least one comparison, so dropping it never changes a query's result
(the caller still applies every comparison). A comparison this module does not
understand (another column, a value of an unexpected type, a naive datetime) adds
no bound; it is never guessed at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
K = TypeVar("K")  # what a bound of a set holds: topic names, partitions
_MICROSECOND = timedelta(microseconds=1)
OPS = frozenset(("=", "<", "<=", ">", ">=", "in"))


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _meet(a: frozenset[K] | None, b: frozenset[K] | None) -> frozenset[K] | None:
    return b if a is None else a if b is None else a & b


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _micros(value: object) -> int | None:
    """Microseconds since the epoch of an aware datetime (Spark's TimestampType value)."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return None
    return (value - _EPOCH) // _MICROSECOND


@dataclass(frozen=True)
class RowBounds:
    """Inclusive bounds on the rows a query keeps; None: no bound on that column."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_offset: int | None = None
    max_offset: int | None = None
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None

    @property
    def empty(self) -> bool:
        """No row can pass (e.g. ``partition = 1 AND partition = 2``)."""
        return (
            self.topics == frozenset()
            or self.partitions == frozenset()
            or (
                self.min_offset is not None
                and self.max_offset is not None
                and self.min_offset > self.max_offset
            )
            or (
                self.min_timestamp_ms is not None
                and self.max_timestamp_ms is not None
                and self.min_timestamp_ms > self.max_timestamp_ms
            )
        )

    @property
    def bounds_timestamps(self) -> bool:
        return self.min_timestamp_ms is not None or self.max_timestamp_ms is not None

    def keeps_partition(self, topic: str, partition: int) -> bool:
        if self.empty:
            return False
        if self.topics is not None and topic not in self.topics:
            return False
        return self.partitions is None or partition in self.partitions

    def meet(self, other: RowBounds) -> RowBounds:
        """Both bounds at once (the AND of the comparisons behind them)."""
        return RowBounds(
            topics=_meet(self.topics, other.topics),
            partitions=_meet(self.partitions, other.partitions),
            min_offset=_max(self.min_offset, other.min_offset),
            max_offset=_min(self.max_offset, other.max_offset),
            min_timestamp_ms=_max(self.min_timestamp_ms, other.min_timestamp_ms),
            max_timestamp_ms=_min(self.max_timestamp_ms, other.max_timestamp_ms),
        )

    def with_comparison(self, column: str, op: str, value: object) -> RowBounds:
        """These bounds AND ``column op value`` (unchanged if it is not understood)."""
        return self.meet(comparison_bounds(column, op, value))

    def __str__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)]
        return "RowBounds(" + ", ".join(p for p in parts if not p.endswith("=None")) + ")"


ALL_ROWS = RowBounds()


def _offset_range(op: str, value: int) -> RowBounds:
    """Bounds of ``offset op value``."""
    if op == "=":
        return RowBounds(min_offset=value, max_offset=value)
    if op == ">":
        return RowBounds(min_offset=value + 1)
    if op == ">=":
        return RowBounds(min_offset=value)
    if op == "<":
        return RowBounds(max_offset=value - 1)
    return RowBounds(max_offset=value)  # "<="


def _timestamp_range(op: str, micros: int) -> RowBounds:
    """Millisecond bounds of ``timestamp op micros``: a record of ``ms`` is shown as
    ``ms * 1000`` microseconds, so e.g. ``>= 1500 us`` keeps ``ms >= 2`` (ceiling)."""
    floor, ceil = micros // 1000, -(-micros // 1000)
    if op == "=":
        if floor != ceil:  # no millisecond equals it: nothing passes
            return RowBounds(min_timestamp_ms=ceil, max_timestamp_ms=floor)
        return RowBounds(min_timestamp_ms=floor, max_timestamp_ms=floor)
    if op == ">":
        return RowBounds(min_timestamp_ms=floor + 1)
    if op == ">=":
        return RowBounds(min_timestamp_ms=ceil)
    if op == "<":
        return RowBounds(max_timestamp_ms=ceil - 1)
    return RowBounds(max_timestamp_ms=floor)  # "<="


def comparison_bounds(column: str, op: str, value: object) -> RowBounds:
    """The bounds of one comparison; ALL_ROWS when it is not understood."""
    if op not in OPS:
        return ALL_ROWS
    if op == "in":
        if not isinstance(value, Iterable) or isinstance(value, str | bytes):
            return ALL_ROWS
        values = list(value)
        if column == "topic":
            if not all(isinstance(v, str) for v in values):
                return ALL_ROWS
            return RowBounds(topics=frozenset(values))
        if column == "partition":
            ints = [_int(v) for v in values]
            if any(v is None for v in ints):
                return ALL_ROWS
            return RowBounds(partitions=frozenset(v for v in ints if v is not None))
        # offset / timestamp: the range from the smallest to the largest value
        out: RowBounds | None = None
        for v in values:
            one = comparison_bounds(column, "=", v)
            if one == ALL_ROWS:
                return ALL_ROWS  # a value not understood: no bound at all
            if out is None:
                out = one
            elif not one.empty:
                out = _span(out, one) if not out.empty else one
        if out is None:  # IN () keeps nothing
            return RowBounds(partitions=frozenset())
        return out
    if column == "topic":
        if op == "=" and isinstance(value, str):
            return RowBounds(topics=frozenset((value,)))
        return ALL_ROWS
    if column == "partition":
        v = _int(value)
        if v is None:
            return ALL_ROWS
        if op == "=":
            return RowBounds(partitions=frozenset((v,)))
        return ALL_ROWS  # a partition range: few partitions, not worth a bound
    if column == "offset":
        v = _int(value)
        return ALL_ROWS if v is None else _offset_range(op, v)
    if column == "timestamp":
        micros = _micros(value)
        return ALL_ROWS if micros is None else _timestamp_range(op, micros)
    return ALL_ROWS


def _span(a: RowBounds, b: RowBounds) -> RowBounds:
    """The smallest bounds holding both (an OR of two equalities on one column)."""
    return RowBounds(
        min_offset=None if a.min_offset is None or b.min_offset is None
        else min(a.min_offset, b.min_offset),
        max_offset=None if a.max_offset is None or b.max_offset is None
        else max(a.max_offset, b.max_offset),
        min_timestamp_ms=None if a.min_timestamp_ms is None or b.min_timestamp_ms is None
        else min(a.min_timestamp_ms, b.min_timestamp_ms),
        max_timestamp_ms=None if a.max_timestamp_ms is None or b.max_timestamp_ms is None
        else max(a.max_timestamp_ms, b.max_timestamp_ms),
    )  # fmt: skip


__all__ = ["ALL_ROWS", "OPS", "RowBounds", "comparison_bounds"]
