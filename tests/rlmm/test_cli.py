"""The `rlmm` command's thin layer: config resolution and error rendering."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rlmm.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_config_prints_resolved_settings() -> None:
    result = CliRunner().invoke(
        main,
        ["config", "--config", str(ROOT / "config/embedded.toml"), "--set", "snapshot.keep=5"],
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["snapshot"]["keep"] == 5
    assert shown["eventlog"]["type"] == "file"


def test_bad_setting_is_a_clear_error_not_a_traceback() -> None:
    result = CliRunner().invoke(main, ["config", "--set", "nope.x=1"])
    assert result.exit_code == 2
    assert "unknown section 'nope'" in result.output
    assert "Traceback" not in result.output


def test_config_shows_a_kafka_name_under_eventlog_as_the_setting_it_is(tmp_path: Path) -> None:
    """Not beside the real key, silently: it is that key."""
    file = tmp_path / "k.toml"
    file.write_text(
        '[eventlog]\ntype = "kafka"\n'
        '"remote.log.metadata.common.client.bootstrap.servers" = "h:9092"\n'
    )
    result = CliRunner().invoke(main, ["config", "--config", str(file)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)["eventlog"]
    assert shown == {"type": "kafka", "bootstrap_servers": "h:9092", "partitions": 50}
    typo = tmp_path / "typo.toml"
    typo.write_text("[eventlog]\npartitons = 3\n")
    refused = CliRunner().invoke(main, ["config", "--config", str(typo)])
    assert refused.exit_code == 2
    assert "unknown setting eventlog.partitons" in refused.output
    assert "Traceback" not in refused.output


def test_a_usage_error_is_one_line_naming_the_help_to_read() -> None:
    """click printed three lines and a blank for one problem (usage, a hint, the error:
    issue 46, a missing --log-dir); now one line, exit 2, as every other error."""
    import subprocess
    import sys

    cases = {
        ("offload",): "error: missing option '--log-dir' (see 'rlmm offload --help')",
        ("restore", "--topic", "t", "--bootstrap-server", "x:1", "--partitions", "a"): (
            "error: invalid value for '--partitions': 'a': expected numbers like 0,1,3"
            " (see 'rlmm restore --help')"
        ),
        ("nosuch",): "error: no such command 'nosuch' (see 'rlmm --help')",
        ("--nosuch", "config"): "error: no such option '--nosuch' (see 'rlmm --help')",
    }
    for args, line in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", *args],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.splitlines() == [line], (args, done.stderr)
        assert done.stdout == "", args
    as_json = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "offload", "--json"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert as_json.returncode == 2 and as_json.stderr == ""
    error = json.loads(as_json.stdout)["error"]
    assert error["message"] == "missing option '--log-dir' (see 'rlmm offload --help')"


def test_config_shows_a_broker_id_nobody_set_as_null_and_every_section() -> None:
    """Issue 46: `rlmm config` said `broker_id 0` when none was set (the sidecar takes
    node.id from meta.properties) and left [offload] out."""
    result = CliRunner().invoke(main, ["config", "--config", str(ROOT / "config/offload.toml")])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["broker_id"] is None
    assert "meta.properties" in shown["broker_id_note"]
    assert {"data_dir", "manager", "eventlog", "snapshot", "remote", "archive", "offload"} <= set(
        shown
    )
    assert shown["offload"]["retention.ms"] == 604800000
    assert shown["offload"]["topics"]["scratch"] == {"remote.storage.enable": False}
    assert shown["archive"] == {"side_index": "auto"}
    for args in (["--set", "broker_id=3"], ["--config", str(ROOT / "config/embedded.toml")]):
        configured = json.loads(CliRunner().invoke(main, ["config", *args]).output)
        assert configured["broker_id"] == (3 if "--set" in args else 0)
        assert "broker_id_note" not in configured


def test_config_redacts_the_offload_cluster_s_secrets_as_the_event_log_s() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
        ' username="rlmm" password="s3cret";'
    )
    result = CliRunner().invoke(
        main,
        ["config", "--set", f"offload.sasl.jaas.config={jaas}",
         "--set", "offload.bootstrap.servers=k:9092", "--set", "offload.ssl.key.password=k3y"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output and "k3y" not in result.output
    offload = json.loads(result.output)["offload"]
    # beside the other [offload] keys, as a file writes them
    assert offload["bootstrap.servers"] == "k:9092" and "cluster" not in offload
    assert offload["sasl.jaas.config"].endswith('username="rlmm" password="[redacted]";')
    assert offload["ssl.key.password"] == "[redacted]"
