"""gc's plan: what it fences, what it leaves to another writer, and what it warns of."""

from __future__ import annotations

import uuid

from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    new_rlmm_segment_id,
)
from rlmm.ops.repair import BROKERS_CAUTION, plan_repairs
from rlmm.ops.verification import Problem, ProblemKind, VerifyReport

TP = TopicIdPartition(uuid.uuid4(), "orders", 0)


def _stuck(segment_id: RemoteLogSegmentId) -> Problem:
    m = RemoteLogSegmentMetadata(segment_id, 0, 99, 0, 1, 0, 100, {0: 0})
    return Problem(ProblemKind.STUCK_COPY_STARTED, "orders", 0, "stuck", segment=m)


def test_a_tier_the_brokers_write_gets_the_caution_with_its_reason() -> None:
    report = VerifyReport([_stuck(RemoteLogSegmentId.generate_new(TP))], False, 3600)
    plan = plan_repairs(report, brokers_write=True)
    assert [a.action for a in plan.actions] == ["delete_segment"]
    assert plan.cautions == [BROKERS_CAUTION]
    assert "tiering stopped" in BROKERS_CAUTION and "led by another broker" in BROKERS_CAUTION
    assert "Why: fencing a copy in flight" in BROKERS_CAUTION
    assert plan.to_dict()["cautions"] == [BROKERS_CAUTION]
    # rlmm's own layout: a signed id is rlmm's, fenced without a caution
    mine = plan_repairs(VerifyReport([_stuck(new_rlmm_segment_id(TP))], False, 3600))
    assert mine.cautions == [] and len(mine.actions) == 1
