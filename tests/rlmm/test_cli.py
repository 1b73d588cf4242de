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
