"""Repair of what verification proves is garbage: the plan, and carrying it out.

The library side of ``rlmm gc``. A plan holds one action per garbage problem of a
VerifyReport: delete an orphan object, abort a stale multipart upload, or take a
segment stuck in COPY_SEGMENT_STARTED / DELETE_SEGMENT_STARTED through the DELETE path
of the metadata (DELETE_SEGMENT_STARTED, delete its objects, DELETE_SEGMENT_FINISHED),
as Kafka's RemoteLogManager deletes a segment. Problems that are not garbage
(missing or damaged objects, lineage gaps) get no action: they need an operator.

Invariants: over rlmm's own layouts (``local``, ``s3``) a stuck segment is only
changed if rlmm wrote it (its id carries rlmm's signature, or objects of it are in
the store): one a broker's own RemoteLogManager left in the shared metadata is left
alone, with why. Over a layout the brokers write (their tier), a plan that fences
stuck segments carries the caution that the brokers' RLM must be stopped (or the
partition led elsewhere) first. A segment younger than the safety window is never
in a plan (verification never reports it). A segment is only moved through the
DELETE path if a writing manager,
caught up with the metadata log, still sees it in the STARTED state the plan found
(a copy that finished meanwhile is left alone), and its DELETE_SEGMENT_STARTED event is
acknowledged before any of its objects is deleted, so a crash mid-way leaves the
segment in DELETE_SEGMENT_STARTED, which a later ``gc`` finishes once that event is
older than the safety window.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from remote.layouts import RemoteLayout
from remote.storage import MultipartUpload
from rlmm.base import RemoteLogMetadataManager
from rlmm.config import RlmmConfig
from rlmm.factory import create_manager, open_event_log
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    is_rlmm_segment_id,
    kafka_uuid_to_str,
)
from rlmm.ops.verification import GARBAGE, Problem, ProblemKind, VerifyReport

_S = RemoteLogSegmentState
_ACTIONS = {
    ProblemKind.ORPHAN_OBJECT: "delete_object",
    ProblemKind.STALE_MULTIPART_UPLOAD: "abort_multipart_upload",
    ProblemKind.STUCK_COPY_STARTED: "delete_segment",
    ProblemKind.STUCK_DELETE_STARTED: "delete_segment",
}


@dataclass(frozen=True)
class RepairAction:
    """What gc does about one problem."""

    action: str
    problem: Problem

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, **self.problem.to_dict()}


NOT_OURS = (
    "not written by rlmm (no rlmm segment id, no object in rlmm's store): a broker's own"
    " RemoteLogManager (or another tool) wrote it into the shared metadata; gc leaves it"
    " to its writer"
)
BROKERS_CAUTION = (
    "the brokers write this tier: a segment stuck in a STARTED state may be a copy or a"
    " delete their RemoteLogManager still has in flight (a large segment over a slow"
    " store can outlast the safety window). Run gc --apply on those segments only with"
    " the brokers' tiering stopped, or once the partition is led by another broker (a"
    " new leader cleans up its predecessor's leftovers itself). Why: fencing a copy in"
    " flight makes the broker's COPY_SEGMENT_FINISHED an illegal transition, its upload"
    " is then left behind, and the copy is redone"
)


@dataclass
class RepairPlan:
    actions: list[RepairAction]
    left_alone: list[Problem]
    applied: bool = False
    done: list[RepairAction] = field(default_factory=list)
    skipped: list[tuple[RepairAction, str]] = field(default_factory=list)
    not_ours: list[Problem] = field(default_factory=list)  # garbage rlmm did not write
    cautions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "actions": [a.to_dict() for a in self.actions],
            "done": [a.to_dict() for a in self.done],
            "skipped": [{**a.to_dict(), "reason": why} for a, why in self.skipped],
            "left_alone": [p.to_dict() for p in self.left_alone],
            "not_ours": [{**p.to_dict(), "reason": NOT_OURS} for p in self.not_ours],
            "cautions": list(self.cautions),
        }


def rlmm_wrote(layout: RemoteLayout, m: RemoteLogSegmentMetadata) -> bool:
    """True when rlmm wrote segment ``m``: its id is signed, or the store holds an object
    of it (a copy of a release before signatures)."""
    if is_rlmm_segment_id(m.remote_log_segment_id):
        return True
    wanted = kafka_uuid_to_str(m.remote_log_segment_id.id)
    for obj in layout.list_objects(m.topic_id_partition):
        name = layout.parse_object_name(obj.name)
        if name is not None and name.segment_id == wanted:
            return True
    return False


def plan_repairs(
    report: VerifyReport, layout: RemoteLayout | None = None, *, brokers_write: bool = False
) -> RepairPlan:
    """One action per garbage problem of ``report``; the other problems are left alone.

    ``layout`` (rlmm's own): a stuck segment rlmm did not write goes to ``not_ours``.
    ``brokers_write``: the layout is the brokers' tier; fencing stuck segments gets
    BROKERS_CAUTION."""
    actions: list[RepairAction] = []
    left: list[Problem] = []
    not_ours: list[Problem] = []
    for p in report.problems:
        if p.kind not in GARBAGE:
            left.append(p)
        elif p.segment is not None and layout is not None and not rlmm_wrote(layout, p.segment):
            not_ours.append(p)
        else:
            actions.append(RepairAction(_ACTIONS[p.kind], p))
    plan = RepairPlan(actions, left, not_ours=not_ours)
    if brokers_write and any(a.action == "delete_segment" for a in actions):
        plan.cautions.append(BROKERS_CAUTION)
    return plan


async def _delete_segments(
    config: RlmmConfig, layout: RemoteLayout, plan: RepairPlan, actions: list[RepairAction]
) -> None:
    targets = [a.problem.segment for a in actions if a.problem.segment is not None]
    tps = sorted({m.topic_id_partition for m in targets}, key=lambda t: (t.topic, t.partition))
    manager = create_manager(config, open_event_log(config))
    try:
        await manager.start()
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, float(config.manager["ready_timeout_s"]))
        for action in actions:
            found = action.problem.segment
            assert found is not None
            current = next(
                (
                    m
                    for m in manager.list_remote_log_segments(found.topic_id_partition)
                    if m.remote_log_segment_id == found.remote_log_segment_id
                ),
                None,
            )
            if current is None or current.state != found.state:
                now = "gone" if current is None else current.state.name
                plan.skipped.append(
                    (action, f"state changed since verify ({found.state.name} -> {now})")
                )
                continue
            await _delete_segment(config, layout, manager, current)
            plan.done.append(action)
    finally:
        await manager.close()


async def _delete_segment(
    config: RlmmConfig,
    layout: RemoteLayout,
    manager: RemoteLogMetadataManager,
    m: RemoteLogSegmentMetadata,
) -> None:
    def update(state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate:
        return RemoteLogSegmentMetadataUpdate(
            m.remote_log_segment_id,
            int(time.time() * 1000),
            m.custom_metadata,
            state,
            config.broker_id,
        )

    if m.state == _S.COPY_SEGMENT_STARTED:
        await manager.update_remote_log_segment_metadata(update(_S.DELETE_SEGMENT_STARTED))
    await asyncio.to_thread(layout.delete_segment_objects, m)
    await manager.update_remote_log_segment_metadata(update(_S.DELETE_SEGMENT_FINISHED))


def apply_repairs(config: RlmmConfig, layout: RemoteLayout, plan: RepairPlan) -> RepairPlan:
    """Carry out ``plan`` (objects and uploads first, then the segments); returns it with
    ``done`` and ``skipped`` filled in. Errors of the store or the metadata log raise."""
    plan.applied = True
    by_kind: dict[str, list[RepairAction]] = {}
    for action in plan.actions:
        by_kind.setdefault(action.action, []).append(action)
    objects = by_kind.get("delete_object", [])
    if objects:
        layout.delete_objects([a.problem.object_name for a in objects if a.problem.object_name])
        plan.done.extend(objects)
    for action in by_kind.get("abort_multipart_upload", []):
        p = action.problem
        assert p.object_name is not None and p.upload_id is not None
        layout.abort_multipart_upload(MultipartUpload(p.object_name, p.upload_id, 0))
        plan.done.append(action)
    segments = by_kind.get("delete_segment", [])
    if segments:
        asyncio.run(_delete_segments(config, layout, plan, segments))
    return plan


__all__ = ["RepairAction", "RepairPlan", "apply_repairs", "plan_repairs"]
