"""TopicConfigKeeper: each led topic's own configs, kept in the store for `rlmm restore`.

Job: after a round, for the topics whose partitions this sidecar leads, ask the cluster
for the configs set on each topic (``ClusterClient.topic_configs``: one DescribeConfigs
for every topic due) and write them to the store's ``__topic_configs/`` object of the
topic id (``remote.topic_configs``) when they differ from what it holds. A topic is due
on first sight, every ``topic.configs.refresh.ms`` after (5 minutes by default), and at
once when the tiering configs the round's view carries change (those are asked every
poll anyway): the full description is not asked every round.

Invariants: nothing here stops or delays the offloading beyond one bounded cluster call
per round: a failure (the cluster, the store) is logged once per distinct cause and
tried again the next round; an object is written only when its configs changed (read
back once per topic id and process, so a restarted sidecar does not rewrite them all);
without a cluster, or with a store rlmm does not write, nothing is kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping

from remote.errors import TopicConfigsError
from remote.topic_configs import TopicConfigs, TopicConfigStore
from rlmm.model import TopicIdPartition, kafka_uuid_to_str
from rlmm.offload.cluster import ClusterClient, ClusterView
from rlmm.offload.errors import OffloadError

log = logging.getLogger(__name__)


class TopicConfigKeeper:
    """Keeps the led topics' configs in ``store`` (see the module docstring)."""

    def __init__(
        self,
        store: TopicConfigStore | None,
        cluster: ClusterClient | None,
        refresh_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.refresh_s = refresh_s
        self._clock = clock
        self._checked: dict[tuple[str, str], float] = {}  # (topic, topic id) -> when
        self._kept: dict[tuple[str, str], Mapping[str, str] | None] = {}  # as stored
        self._seen: dict[str, Mapping[str, str]] = {}  # the view's tiering configs
        self._failed: str | None = None
        self.writes = 0  # objects written by this process

    def due(
        self, led: Collection[TopicIdPartition], view: ClusterView | None
    ) -> set[tuple[str, str]]:
        """The (topic, topic id) of ``led`` whose configs are to be asked now."""
        now = self._clock()
        tiering = view.topic_configs if view is not None else {}
        out: set[tuple[str, str]] = set()
        for tp in led:
            key = (tp.topic, kafka_uuid_to_str(tp.topic_id))
            checked = self._checked.get(key)
            seen, now_seen = self._seen.get(tp.topic), tiering.get(tp.topic)
            changed = seen is not None and now_seen is not None and seen != now_seen
            if checked is None or now - checked >= self.refresh_s or changed:
                out.add(key)
        self._seen.update({t: tiering[t] for t, _ in out if t in tiering})
        return out

    async def after_round(
        self, led: Collection[TopicIdPartition], view: ClusterView | None
    ) -> None:
        """Ask and keep the configs of the led topics that are due (never raises)."""
        if self.store is None or self.cluster is None or not led:
            return
        due = self.due(led, view)
        if not due:
            return
        try:
            described = await self.cluster.topic_configs({t for t, _ in due})
            for key in sorted(due):
                topic, topic_id = key
                if topic not in described:
                    continue  # deleted meanwhile
                await self._keep(topic, topic_id, described[topic])
                self._checked[key] = self._clock()
        except (OffloadError, TopicConfigsError) as e:
            if str(e) != self._failed:
                log.warning(
                    "topic configs are not kept for rlmm restore this round (tried again"
                    " next round): %s",
                    e,
                )
            self._failed = str(e)
            return
        self._failed = None

    async def _keep(self, topic: str, topic_id: str, configs: Mapping[str, str]) -> None:
        store = self.store
        assert store is not None
        key = (topic, topic_id)
        if key not in self._kept:
            try:
                found = await asyncio.to_thread(store.read, topic, topic_id)
            except TopicConfigsError as e:
                log.warning("%s; writing it again", e)
                found = None
            self._kept[key] = None if found is None else dict(found.configs)
        if self._kept[key] == dict(configs):
            return
        before = self._kept[key]
        kept = TopicConfigs(topic, topic_id, dict(configs), int(time.time() * 1000))
        await asyncio.to_thread(store.write, kept)
        self._kept[key] = dict(configs)
        self.writes += 1
        shown = ", ".join(f"{k}={v}" for k, v in sorted(configs.items())) or "none"
        log.info(
            "topic %s: its configs (%s) %s in %s", topic, shown,
            "kept" if before is None else "changed, kept again",
            store.where(topic, topic_id),
        )  # fmt: skip

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


__all__ = ["TopicConfigKeeper"]
