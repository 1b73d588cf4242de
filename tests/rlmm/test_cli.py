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
