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
