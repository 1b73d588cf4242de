"""docs/config.md is held to the code: every key the configuration accepts is on the
page, every key the page lists is accepted, with the default the code has.

The truth is where the config check finds it: ``rlmm.config.DEFAULTS`` (and its
``[offload]`` tables), the event log and remote registries (an event log type's keys
from its class's ``options()``, a remote type's from its constructor or layout), Kafka's
property names that ``eventlog._kafka_config`` maps, and the environment variables
``rlmm.config`` leaves alone. A table row names its keys in backticks in its first
cell; its section is the heading above it."""

from __future__ import annotations

import inspect
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from eventlog import EventLogConfigError
from eventlog import _kafka_config as kafka_names
from eventlog.registry import EVENT_LOG_TYPES, backend, known_options
from remote.layouts import aiven_s3
from remote.registry import REMOTE_TYPES
from rlmm.config import (
    _KAFKA_NAMES,
    _SNAPSHOT_OPTIONAL,
    DEFAULTS,
    ENV_NOT_SETTINGS,
    OFFLOAD_CLIENT_SETTINGS,
    OFFLOAD_TOPIC_SETTINGS,
    load_config,
)
from rlmm.errors import ConfigError
from snapshot.registry import SNAPSHOT_STORE_TYPES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "config.md"
TYPE = re.compile(r'type = "([^"]+)"')
CLIENTS = ("common.client", "producer", "consumer")  # Kafka's <client>


def rows() -> dict[tuple[str, str | None], list[dict[str, str]]]:
    """The page's table rows by (section, subsection), each as header -> cell."""
    found: dict[tuple[str, str | None], list[dict[str, str]]] = defaultdict(list)
    h2, h3 = "", None
    header: list[str] = []
    lines = PAGE.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## "):
            h2, h3 = line[3:].strip(), None
        elif line.startswith("### "):
            h3 = line[4:].strip().replace("\\", "")
        elif line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip("|").split("|")]
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == len(header), f"docs/config.md: a row of {h2}/{h3}: {line}"
            found[(h2, h3)].append(dict(zip(header, cells, strict=True)))
    return found


ROWS = rows()


def keys(row: dict[str, str]) -> list[str]:
    return re.findall(r"`([^`]+)`", next(iter(row.values())))


def keys_of(section: str, subsection: str | None = None) -> set[str]:
    found = {k for row in ROWS[(section, subsection)] for k in keys(row)}
    assert found, f"docs/config.md has no table under {section} / {subsection}"
    return found


def typed_sections(section: str) -> dict[str, str | None]:
    """type name -> its subsection heading, for the subsections named after a type."""
    return {
        m.group(1): h3
        for (h2, h3) in ROWS
        if h2 == section and h3 is not None and (m := TYPE.match(h3))
    }


def show(value: Any) -> str:
    """A default as the page writes it (TOML's spelling)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_defaults(section: str, subsection: str | None, defaults: dict[str, Any]) -> None:
    """Each row's default cell names each of its keys' defaults that the code has."""
    for row in ROWS[(section, subsection)]:
        cell = row["default"]
        for key in keys(row):
            value = defaults.get(key, inspect.Parameter.empty)
            if value is inspect.Parameter.empty or value is None:
                continue
            if value == "":
                assert "empty" in cell, (section, subsection, key, cell)
            elif value == (1 << 63) - 1:  # Kafka's "unlimited"
                assert "unlimited" in cell, (section, subsection, key, cell)
            else:
                assert f"`{show(value)}`" in cell, (section, subsection, key, cell)


def signature_defaults(cls: Any) -> dict[str, Any]:
    return {p.name: p.default for p in inspect.signature(cls).parameters.values()}


def test_every_section_has_its_place() -> None:
    sections = {h2 for h2, _ in ROWS}
    assert {f"[{name}]" for name, v in DEFAULTS.items() if isinstance(v, dict)} <= sections
    top = {name for name, v in DEFAULTS.items() if not isinstance(v, dict)}
    assert keys_of("Top level") == top


@pytest.mark.parametrize("section", ["manager", "snapshot", "archive"])
def test_a_section_of_our_own_lists_its_keys_and_defaults(section: str) -> None:
    known = set(DEFAULTS[section]) | (set(_SNAPSHOT_OPTIONAL) if section == "snapshot" else set())
    assert keys_of(f"[{section}]") == known
    check_defaults(f"[{section}]", None, DEFAULTS[section])


def test_every_event_log_type_lists_the_keys_it_takes() -> None:
    assert keys_of("[eventlog]") == {"type"}
    (type_row,) = ROWS[("[eventlog]", None)]
    assert set(re.findall(r"`([^`]+)`", type_row["meaning"])) >= set(EVENT_LOG_TYPES)
    sections = typed_sections("[eventlog]")
    assert set(sections) == set(EVENT_LOG_TYPES)
    for kind, heading in sections.items():
        assert keys_of("[eventlog]", heading) == set(known_options(kind)), kind
        defaults = {**backend(kind).options(), **DEFAULTS["eventlog"]}
        check_defaults("[eventlog]", heading, defaults)


def test_every_remote_type_lists_the_keys_it_takes() -> None:
    assert keys_of("[remote]") == {"type"}
    (type_row,) = ROWS[("[remote]", None)]
    assert set(re.findall(r"`([^`]+)`", type_row["meaning"])) >= set(REMOTE_TYPES)
    sections = typed_sections("[remote]")
    assert set(sections) == set(REMOTE_TYPES)
    for kind, heading in sections.items():
        entry = REMOTE_TYPES[kind]
        assert ("read only" in (heading or "")) == entry.read_only, heading
        listed = keys_of("[remote]", heading)
        known = entry.known_options()
        if known is not None:
            assert listed == set(known), kind
            if not entry.read_only:
                writer = entry.storage_manager_class()
                check_defaults("[remote]", heading, signature_defaults(writer))
            continue
        # open-ended (Aiven's plugin): ours and the plugin's names, and a pattern per key
        # pair, are on the page; everything the page names is accepted
        ours = set(aiven_s3._OPTIONS) | set(aiven_s3._ALIASES)
        assert ours | {"encryption.key.pairs.<id>.private.key.file"} <= listed
        for key in listed:
            sample = key.replace("<id>", "k1").replace("*", "x")
            entry.layout_class().check_options({"type": kind, sample: "v"})


def test_snapshot_stores_are_named() -> None:
    (store,) = [row for row in ROWS[("[snapshot]", None)] if keys(row) == ["store"]]
    assert set(re.findall(r"`([^`]+)`", store["meaning"])) >= set(SNAPSHOT_STORE_TYPES)


def test_offload_lists_its_keys_its_topic_keys_and_its_cluster_client() -> None:
    assert keys_of("[offload]") == set(DEFAULTS["offload"])
    check_defaults("[offload]", None, DEFAULTS["offload"])
    assert keys_of("[offload]", "[offload.topics.<topic>]") == set(OFFLOAD_TOPIC_SETTINGS)
    client = keys_of("[offload]", "The cluster, when the event log is not Kafka")
    assert client == set(OFFLOAD_CLIENT_SETTINGS) | set(kafka_names._SSL_KEYS)
    for key in client | keys_of("[offload]"):  # accepted where the page puts them
        value = DEFAULTS["offload"].get(key, "x")
        load_config(overrides={f"offload.{key}": value}, env={})
        if key in OFFLOAD_TOPIC_SETTINGS:
            load_config(overrides={f"offload.topics.orders.{key}": value}, env={})


def kafka_names_accepted() -> set[str]:
    """Every remote.log.metadata.* name the Kafka event log maps (eventlog._kafka_config)."""
    fixed = set(kafka_names._FIXED_VALUES)
    common = set(kafka_names._COMMON_PROPS)
    per_client = {
        "common.client": set(OFFLOAD_CLIENT_SETTINGS) | set(kafka_names._SSL_KEYS),
        "producer": set(kafka_names._PRODUCER_PROPS) | {"delivery.timeout.ms"},
        "consumer": set(kafka_names._CONSUMER_PROPS),
    }
    names = {f"remote.log.metadata.{name}" for name in kafka_names._LOG_PROPS}
    for client, own in per_client.items():
        names |= {f"remote.log.metadata.{client}.{name}" for name in own | common | fixed}
    return names


def test_kafka_s_names_are_the_ones_the_kafka_event_log_maps() -> None:
    listed: set[str] = set()
    for row in ROWS[("[eventlog]", "Kafka's property names")]:
        for key in keys(row):
            expanded = [key.replace("<client>", c) for c in CLIENTS] if "<client>" in key else [key]
            listed |= set(expanded)
            if key in _KAFKA_NAMES:  # a setting of our own: the page names it
                assert f"`{_KAFKA_NAMES[key]}`" in row["is"], key
    assert set(_KAFKA_NAMES) <= listed
    assert listed == kafka_names_accepted()
    for name in sorted(listed):
        value = kafka_names._FIXED_VALUES.get(name.rsplit(".", 1)[-1], ("1",))[0]
        props = {"remote.log.metadata.common.client.bootstrap.servers": "h:9092", name: value}
        try:
            kafka_names.map_properties(props)
        except EventLogConfigError as e:  # a value it refuses is fine; the name is known
            assert "unsupported property" not in str(e), name


def test_environment_variables_that_are_not_settings_are_listed() -> None:
    named = {k for row in ROWS[("Environment variables", None)] for k in keys(row)}
    assert named >= ENV_NOT_SETTINGS
    samples = {"RLMM_DATA_DIR": "/var/lib/rlmm"}
    for name in named - ENV_NOT_SETTINGS:
        if "<" in name:
            continue
        load_config(env={name: samples.get(name, "1")})  # a setting: accepted


def test_an_rlmm_variable_of_serve_or_the_suite_is_not_an_unknown_setting() -> None:
    """`rlmm serve` reads RLMM_SERVE_METRICS_PORT from the broker's environment, where
    docs/plugin.md says to set it: the configuration loaded beside it must not refuse it
    (it did: `unknown environment setting RLMM_SERVE_METRICS_PORT`)."""
    env = {"RLMM_SERVE_METRICS_PORT": "9406", "RLMM_SERVE_METRICS_HOST": "0.0.0.0"}
    assert load_config(env=env).source == "defaults"
    load_config(env={"RLMM_APACHE_KAFKA": "0", "RLMM_TEST_CACHE": "/tmp/c"})
    with pytest.raises(ConfigError, match="RLMM_SERVE_METRICS_PROT"):
        load_config(env={"RLMM_SERVE_METRICS_PROT": "9406"})
