"""The checks a restore makes of its target before writing (``rlmm.restore.checks``),
against a fake cluster: every problem of the target is named in one refusal, with a
remedy that fixes all of them, so following it does not meet a second refusal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from rlmm.restore import (
    IDENTITY,
    MURMUR2,
    PartitionCountMismatchError,
    Progress,
    RestoreInputError,
    RestoreOptions,
    RestorePlan,
    RestoreSelection,
    checks,
)
from rlmm.restore.checks import prepare

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


class FakeCluster:
    """What ``prepare`` asks of a target cluster: topics and one committed record."""

    client: Mapping[str, Any] = {"bootstrap_servers": "127.0.0.1:1"}  # never contacted

    def __init__(self, counts: dict[str, int], record: tuple[int, int] | None) -> None:
        self.counts = counts
        self.record = record

    async def partition_counts(self) -> dict[str, int]:
        return dict(self.counts)

    async def committed_record(self, topic: str, partitions: int) -> tuple[int, int] | None:
        return self.record


def plan(source_partitions: int, partitioner: str = IDENTITY, target: str = "one") -> RestorePlan:
    selection = RestoreSelection("orders", partitioner=partitioner, target_topic=target)
    return RestorePlan(selection, "orders", TOPIC_ID, source_partitions, (), "store", "x")


async def refusal(p: RestorePlan, cluster: FakeCluster, **options: Any) -> str:
    with pytest.raises(Exception) as info:
        await prepare(p, lambda _resume: p, cluster, RestoreOptions(dry_run=True, **options))  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return f"{type(info.value).__name__}: {message}"


async def test_a_target_with_other_partitions_and_data_is_one_refusal_naming_both() -> None:
    """Issue 46: a 1-partition target holding data, a 3-partition source. The first
    refusal said "pass --partitioner murmur2", and following it met the second
    ("already holds data"). Now one refusal names both, with a remedy for both; and
    --partitioner murmur2 alone is still refused for the data, never for the count."""
    occupied = FakeCluster({"one": 1}, record=(0, 0))
    first = await refusal(plan(3), occupied)
    assert first.startswith("TargetNotEmptyError: target topic 'one' has 1 partition "), first
    assert "(the source 'orders' has 3)" in first and "already holds data" in first, first
    assert "partition 0 offset 0" in first and "new topic" in first, first
    assert "pass --partitioner murmur2 to" not in first, first
    second = await refusal(plan(3, MURMUR2), occupied)
    assert second.startswith("TargetNotEmptyError: target topic 'one' already holds data"), second
    assert "partition" not in second.split("holds data")[0]


async def test_a_partition_count_mismatch_alone_says_partition_in_the_singular() -> None:
    empty_one = FakeCluster({"one": 1}, record=None)
    message = await refusal(plan(3), empty_one)
    assert message == (
        "PartitionCountMismatchError: target topic 'one' has 1 partition, the source 'orders'"
        " has 3 partitions: pass --partitioner murmur2 to spread the records by key, or"
        " restore into a new topic"
    )
    message = await refusal(plan(1), FakeCluster({"one": 3}, record=None))
    assert "has 3 partitions, the source 'orders' has 1 partition:" in message, message
    assert issubclass(PartitionCountMismatchError, RestoreInputError)


async def test_a_target_holding_a_restore_by_another_partitioner_names_both_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The saved progress is of a murmur2 restore into a 1-partition target; a run
    without --resume and without --partitioner is told both flags at once."""

    async def saved(*_args: Any, **_kwargs: Any) -> dict[int, Progress]:
        return {
            p: Progress("one", p, "orders", TOPIC_ID, MURMUR2, 0, 10, 5, 5, 0) for p in range(3)
        }

    monkeypatch.setattr(checks, "read_progress", saved)
    message = await refusal(plan(3), FakeCluster({"one": 1, "__rlmm_restore": 1}, (0, 0)))
    assert message.startswith("TargetNotEmptyError: target topic 'one' holds a restore of"), message
    assert "progress of 3 partitions" in message, message
    assert "pass --resume --partitioner murmur2 to continue it" in message, message
