"""deploy/prometheus: the alert rules parse, pass their promtool unit tests, and read
only metrics the sidecar exports (or series the rule files record).

Invariant checked: ``promtool check rules`` and ``promtool test rules`` succeed (skipped,
with the reason, when promtool cannot be had); every ``rlmm_*`` name in the rules is
exported by OffloadMetrics, every recorded ``rlmm:*`` name they read is recorded by
rules.yml or by the operator's local_retention.yml, and every alert has at least one
unit test.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import Metric

from rlmm.offload.metrics import OffloadMetrics
from tests.fixtures.prometheus import PrometheusTools

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"
LOCAL_RETENTION = ROOT / "deploy" / "prometheus" / "local_retention.yml"
NAME = re.compile(r"\brlmm_[a-z0-9_]+")
PROCESS_NAME = re.compile(r"\bprocess_[a-z0-9_]+")
RECORDED = re.compile(r"\brlmm:[a-z0-9_]+")


def exported_names() -> set[str]:
    """Every sample name the sidecar's /metrics can show (counters with ``_total``)."""
    names: set[str] = set()
    family: Metric
    for family in OffloadMetrics().registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
    return names


def test_rules_read_only_exported_metrics() -> None:
    used = set(NAME.findall(RULES.read_text()))
    assert used, "no rlmm metric in the rules"
    assert used <= exported_names(), sorted(used - exported_names())


def test_process_metrics_in_the_rules_are_the_process_collectors() -> None:
    """The sidecar registers prometheus_client's ProcessCollector (checked on a real
    sidecar in tests/rlmm/process/test_native_memory.py): the rules read only its names."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    exported = {family.name for family in registry.collect()}
    used = set(PROCESS_NAME.findall(RULES.read_text()))
    assert used, "no process metric in the rules"
    assert used <= exported, sorted(used - exported)


def test_every_alert_has_a_unit_test() -> None:
    yaml = pytest.importorskip("yaml")
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(RULES_TEST.read_text())
    tested = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]}
    firing = {
        t["alertname"]
        for case in tests["tests"]
        for t in case["alert_rule_test"]
        if t.get("exp_alerts")
    }
    assert alerts == tested == firing, (alerts, tested, firing)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                continue
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def recorded_names(path: Path) -> set[str]:
    yaml = pytest.importorskip("yaml")
    groups = yaml.safe_load(path.read_text())["groups"]
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def test_recorded_series_the_rules_read_are_recorded() -> None:
    used = set(RECORDED.findall(RULES.read_text()))
    assert used <= recorded_names(RULES) | recorded_names(LOCAL_RETENTION), used
    # the operator's file records the brokers' retention per topic, and nothing else
    yaml = pytest.importorskip("yaml")
    for group in yaml.safe_load(LOCAL_RETENTION.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["record"] in (
                "rlmm:topic_local_retention_bytes",
                "rlmm:topic_local_retention_seconds",
            )
            assert set(rule["labels"]) == {"topic"}, rule


def test_copy_lag_is_watched_against_the_topic_s_local_retention() -> None:
    """The moment data is about to be lost: the broker deletes local segments by its own
    retention, copied or not (issue 32)."""
    yaml = pytest.importorskip("yaml")
    rules = {
        r["alert"]: r
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    rule = rules["RlmmCopyLagNearLocalRetention"]
    assert rule["labels"]["severity"] == "critical"
    for name in (
        "rlmm_remote_copy_lag_bytes",
        "rlmm:topic_local_retention_bytes",
        "rlmm:topic_local_retention_seconds",
        "rlmm:remote_copy_lag_clear_timestamp_seconds",
    ):
        assert name in rule["expr"], name


def test_the_archives_recovery_point_is_watched() -> None:
    """The tail no copy holds: each partition's active segment, never copied (issue 46,
    item 1): an age on the newest archived record, and a partition with nothing
    archived at all (it has no age)."""
    yaml = pytest.importorskip("yaml")
    rules = {
        r["alert"]: r
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    old = rules["RlmmArchiveTailOld"]["expr"]
    assert "rlmm_archive_newest_record_age_seconds" in old and "rlmm_unarchived_offsets" in old
    nothing = rules["RlmmNothingArchived"]["expr"]
    assert "unless" in nothing and "rlmm_archive_newest_record_age_seconds" in nothing
    for name in ("RlmmArchiveTailOld", "RlmmNothingArchived"):
        assert "segment.ms" in rules[name]["annotations"]["description"], name


def promtool(tools: PrometheusTools, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.promtool), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_promtool_check_rules(prometheus_bin: PrometheusTools) -> None:
    done = promtool(prometheus_bin, "check", "rules", str(RULES), str(LOCAL_RETENTION))
    assert done.returncode == 0, done.stdout + done.stderr
    for path in (RULES, LOCAL_RETENTION):
        text = path.read_text()
        count = text.count("- alert:") + text.count("- record:")
        assert f"SUCCESS: {count} rules found" in done.stdout, done.stdout


def test_promtool_test_rules(prometheus_bin: PrometheusTools) -> None:
    done = promtool(prometheus_bin, "test", "rules", str(RULES_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
