"""Kafka's per-topic tiering controls in the sidecar (KIP-950) and where settings come from.

Invariants checked: a topic setting comes from ``[offload.topics.<t>]``, then from the
cluster's config of the topic, then from ``[offload]``, and ``effective`` names the
source; ``remote.log.copy.disable`` stops copying while retention keeps deleting;
``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true`` deletes
the topic's remote segments, objects and metadata once, and without the second
setting the remote data stays.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rlmm.archive import open_metadata_view
from rlmm.config import load_config
from rlmm.errors import ConfigError
from rlmm.model import RemotePartitionDeleteState
from rlmm.offload import OffloadSettings
from rlmm.offload.display import Display
from rlmm.offload.sidecar import run_sidecar
from tests.rlmm.offload.conftest import local_keys, make_config
from tests.rlmm.offload.test_sidecar import log_dir, write_config

AUDIT_OFF = '[offload.topics.audit]\n"remote.storage.enable" = false\n'


def test_a_setting_comes_from_the_topic_then_the_cluster_then_offload(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{
        "offload.retention.ms": -1,
        "offload.topics.a.retention.ms": 5,
        "offload.topics.a.local.retention.ms": 7,
    })  # fmt: skip
    settings = OffloadSettings.from_config(config)
    cluster = {"retention.ms": "100", "remote.log.copy.disable": "true"}
    a, origins = settings.effective("a", cluster)
    assert (a.retention_ms, a.local_retention_ms, a.remote_log_copy_disable) == (5, 7, True)
    assert origins["retention.ms"] == "offload.topics.a"
    assert origins["local.retention.ms"] == "offload.topics.a"
    assert origins["remote.log.copy.disable"] == "cluster"
    assert origins["retention.bytes"] == "offload"
    b, origins = settings.effective("b", cluster)
    assert (b.retention_ms, origins["retention.ms"]) == (100, "cluster")
    b, origins = settings.effective("b", None)  # no cluster, or configs denied
    assert (b.retention_ms, b.remote_log_copy_disable) == (-1, False)
    assert set(origins.values()) == {"offload"}
    with pytest.raises(ConfigError, match=r"retention\.ms = 'soon'"):
        settings.effective("b", {"retention.ms": "soon"})


def test_per_topic_local_retention_is_that_topics_setting(tmp_path: Path) -> None:
    """``[offload.topics.t] "local.retention.ms"`` once read as topic ``t.local``."""
    path = tmp_path / "c.toml"
    path.write_text('[offload.topics.t]\n"local.retention.ms" = 5\n')
    assert load_config(path, env={}).offload["topics"] == {"t": {"local.retention.ms": 5}}


async def remote_state(config_path: Path) -> dict[str, object]:
    """Per topic-partition: the live segments' count and the partition-delete state."""
    out: dict[str, object] = {}
    with open_metadata_view(load_config(config_path, env={})) as view:
        for tp in view.topic_partitions():
            state = view.delete_state(tp)
            out[f"{tp.topic}-{tp.partition}"] = (
                len(view.segments(tp)),
                None if state is None else state.state,
            )
    return out


async def test_copy_disable_stops_copying_and_retention_keeps_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs, pdirs, _audit = log_dir(tmp_path)
    path = write_config(
        tmp_path, '[offload.topics.orders]\n"remote.log.copy.disable" = true\n' + AUDIT_OFF
    )
    report = await run_sidecar(load_config(path, env={}), [logs], once=True,
                               display=Display(rich=False))  # fmt: skip
    clicks = len(pdirs[2].segments()) - 1
    assert report.tally.copied == clicks and report.tally.errors == []
    store = tmp_path / "data" / "remote"
    assert not list(store.glob("orders-*")) and list(store.glob("clicks-*"))

    # clicks too now: nothing more is copied, yet retention deletes what is remote
    path = write_config(tmp_path, '[offload.topics.orders]\n"remote.log.copy.disable" = true\n'
                                  '[offload.topics.clicks]\n"remote.log.copy.disable" = true\n'
                                  '"retention.ms" = 1\n' + AUDIT_OFF)  # fmt: skip
    caplog.set_level(logging.INFO)
    report = await run_sidecar(load_config(path, env={}), [logs], once=True,
                               display=Display(rich=False))  # fmt: skip
    assert report.tally.copied == 0 and report.tally.deleted == clicks
    assert report.tally.errors == []
    assert not [k for k in local_keys(store) if k.startswith("clicks-")]


async def test_storage_disabled_with_delete_on_disable_deletes_the_remote_data_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs, pdirs, audit = log_dir(tmp_path)
    # audit is off from the start, with delete.on.disable: never tiered, so no event
    audit_off = AUDIT_OFF + '"remote.log.delete.on.disable" = true\n'
    path = write_config(tmp_path, audit_off)
    report = await run_sidecar(load_config(path, env={}), [logs], once=True,
                               display=Display(rich=False))  # fmt: skip
    orders = sum(len(p.segments()) - 1 for p in pdirs[:2])
    assert report.tally.errors == []
    before = await remote_state(path)
    assert before["orders-0"] == (len(pdirs[0].segments()) - 1, None)

    # remote.storage.enable=false alone: no longer offloaded, the remote data stays
    path = write_config(
        tmp_path, '[offload.topics.orders]\n"remote.storage.enable" = false\n' + audit_off
    )
    report = await run_sidecar(load_config(path, env={}), [logs], once=True,
                               display=Display(rich=False))  # fmt: skip
    assert report.tally.copied == 0 and await remote_state(path) == before

    # with remote.log.delete.on.disable=true: deleted, segments then the partition
    orders_off = '[offload.topics.orders]\n"remote.storage.enable" = false\n'
    delete = '"remote.log.delete.on.disable" = true\n'
    path = write_config(tmp_path, orders_off + delete + audit_off)
    caplog.set_level(logging.INFO, logger="rlmm.offload")
    report = await run_sidecar(load_config(path, env={}), [logs], once=True,
                               display=Display(rich=False))  # fmt: skip
    assert report.tally.errors == []
    after = await remote_state(path)
    finished = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert after["orders-0"] == (0, finished) and after["orders-1"] == (0, finished)
    assert after["clicks-0"] == before["clicks-0"]  # another topic: untouched
    assert f"audit-{audit.partition}" not in after  # never tiered: no event at all
    said = [r.getMessage() for r in caplog.records if "delete.on.disable" in r.getMessage()]
    assert len(said) == 2 and sum(int(m.split("its ")[1].split()[0]) for m in said) == orders
    store = tmp_path / "data" / "remote"
    assert not list(store.glob("orders-*/*")) and list(store.glob("clicks-*"))

    # once: a rerun finds nothing to do and writes nothing
    report = await run_sidecar(load_config(path, env={}), [logs], once=True,
                               display=Display(rich=False))  # fmt: skip
    assert await remote_state(path) == after
