"""deploy/prometheus: the alert rules parse, pass their promtool unit tests, and read
only metrics the sidecar exports.

Invariant checked: ``promtool check rules`` and ``promtool test rules`` succeed (skipped,
with the reason, when promtool cannot be had); every ``rlmm_*`` name in the rules is
exported by OffloadMetrics, and every alert has at least one unit test.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric

from rlmm.offload.metrics import OffloadMetrics
from tests.fixtures.prometheus import PrometheusTools

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"
NAME = re.compile(r"\brlmm_[a-z0-9_]+")


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
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def promtool(tools: PrometheusTools, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.promtool), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_promtool_check_rules(prometheus_bin: PrometheusTools) -> None:
    done = promtool(prometheus_bin, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = RULES.read_text().count("- alert:")
    assert f"SUCCESS: {alerts} rules found" in done.stdout, done.stdout


def test_promtool_test_rules(prometheus_bin: PrometheusTools) -> None:
    done = promtool(prometheus_bin, "test", "rules", str(RULES_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
