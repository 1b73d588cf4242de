"""Import direction of ARCHITECTURE section 2: eventlog and snapshot are leaves, remote
uses only rlmm.model / rlmm.errors of the project, and nothing imports the outer layer
(rlmm.offload, rlmm.spark, rlmm.cli) except itself; the CLI may import the offloader
(the `rlmm offload` sidecar command is a CLI command over it). Inside the core:
rlmm.model and rlmm.errors are a leaf, the codec imports nothing of the cache, the
cache only the codec's public surface, and no one else the private modules of either.
The process's housekeeping (rlmm.process) imports nothing of the project.
One replay: the manager and the archive view both turn event-log records into state
through rlmm.replay, and no other module has an apply body of its own (decoding a
record and applying it, or asking the store whether an event is a redelivery).
One concrete manager: only rlmm.factory imports rlmm.manager; the offloader, ops and
every other caller type against rlmm.base and rlmm.offload_metadata, so each runs
behind the fail-closed facade as well as over the manager.

And the rules of section 4: the backends are the modules the registries name; no
backend imports another, and no other module of its package (the base modules, the
registries, the shared helpers) imports one; in rlmm only the factory builds remote
storage and snapshot stores from configuration. Outside eventlog no module imports the
kafka backend module: a Kafka client of rlmm's own takes eventlog.kafka_client.
Outside eventlog and the factory no module compares an event log type's name: it asks
what the type can do. No import inside a function closes an import cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog.registry import EVENT_LOG_BACKENDS
from remote.registry import REMOTE_TYPES
from snapshot.registry import SNAPSHOT_STORE_BACKENDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlmm", "eventlog", "snapshot", "remote")
OUTER = ("rlmm.offload", "rlmm.spark", "rlmm.cli", "rlmm.restore", "rlmm.plugin")
# (importer, imported) pairs of the outer layer that are allowed.
OUTER_ALLOWED = {
    ("rlmm.cli", "rlmm.offload"),
    ("rlmm.cli", "rlmm.restore"),
    ("rlmm.cli", "rlmm.plugin"),
    # rlmm serve answers the same probes as the sidecar
    ("rlmm.plugin", "rlmm.offload"),
}
LEAF = ("rlmm.model", "rlmm.errors")  # the KIP-405 API types
FAST_PATHS = "rlmm._fast_paths"  # the RLMM_NO_FAST_PATHS switch, a leaf too


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def names_imported_by(path: Path) -> set[str]:
    """Like :func:`imports_of`, with what ``from X import a`` takes as ``X.a``: the
    private parts of a package show whichever way they are imported."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def private_part(name: str, package: str) -> bool:
    """``name`` reaches into a ``_``-prefixed module (or name) of ``package``."""
    return within(name, package) and any(
        part.startswith("_") for part in name[len(package) + 1 :].split(".") if part
    )


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", ["eventlog", "snapshot"])
def test_leaves_import_no_sibling(package: str) -> None:
    for path in modules(package):
        bad = {m for m in imports_of(path) if m.split(".")[0] != package}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_remote_uses_only_the_model_of_rlmm() -> None:
    allowed = {"rlmm.model", "rlmm.errors"}
    for path in modules("remote"):
        bad = {m for m in imports_of(path) if m.split(".")[0] != "remote" and m not in allowed}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_model_and_errors_import_nothing_of_the_project() -> None:
    """The KIP-405 API types are a leaf: the model imports the errors, and that is all."""
    for name, allowed in (("model.py", ("rlmm.errors",)), ("errors.py", ())):
        bad = {m for m in names_imported_by(ROOT / "rlmm" / name) if not within(m, *allowed)}
        assert not bad, f"rlmm/{name} imports {sorted(bad)}"
    # rlmm/__init__ runs first: importing the model must not load anything more
    code = "import sys, rlmm.model\nprint(*sorted(m for m in sys.modules if m.split('.')[0] in %r))"
    run = [sys.executable, "-c", code % (PACKAGES,)]
    loaded = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert loaded.split() == ["rlmm", "rlmm.errors", "rlmm.model"]


CORE_MODULES = {
    # rlmm.base (the RemoteLogMetadataManager ABC) can be imported by anyone
    "base.py": LEAF,
    # what the offloader drives a manager by, beyond Kafka's interface
    "offload_metadata.py": (*LEAF, "rlmm.base", "rlmm.cache"),
    "facade.py": (*LEAF, "rlmm.offload_metadata", "rlmm.cache"),
    "partitioning.py": LEAF,
    "_fast_paths.py": (),
    "topics.py": (),  # topic names the offloader and restore share
    # the one replay of records into state: the manager's and the archive view's
    "replay.py": (*LEAF, "rlmm.codec", "rlmm.cache", "rlmm.partitioning", "eventlog", "snapshot"),
    "manager.py": (
        *LEAF,
        "rlmm.offload_metadata",
        "rlmm.codec",
        "rlmm.cache",
        "rlmm.partitioning",
        "rlmm.replay",
        "rlmm.snapshotting",
        "rlmm.manager_stats",
        "rlmm.applied_waits",
        "rlmm.snapshot_keeper",
        "rlmm.apply_loops",
        "eventlog",
    ),
    # the manager's parts, below it: its counters, the waits for an applied offset,
    # its snapshots and its apply loops
    "manager_stats.py": ("rlmm.replay",),
    "applied_waits.py": ("rlmm.errors", "rlmm.manager_stats"),
    "snapshot_keeper.py": ("rlmm.manager_stats", "rlmm.replay", "rlmm.snapshotting", "eventlog"),
    "apply_loops.py": (
        "rlmm.errors",
        "rlmm.offload_metadata",
        "rlmm.manager_stats",
        "rlmm.applied_waits",
        "rlmm.snapshot_keeper",
        "rlmm.replay",
        "eventlog",
    ),
    # below the factory, which builds its stores and hands them in
    "snapshotting.py": ("rlmm.config", "eventlog", "snapshot"),
    "config.py": ("rlmm.errors", "eventlog", "remote.registry", "snapshot.registry"),
    "secrets.py": (),
    "factory.py": (
        "rlmm.errors",
        "rlmm.config",
        "rlmm.secrets",
        "rlmm.manager",
        "rlmm.snapshotting",
        "eventlog",
        "remote",
        "snapshot",
    ),
}


@pytest.mark.parametrize(("name", "allowed"), CORE_MODULES.items())
def test_core_modules_import_only(name: str, allowed: tuple[str, ...]) -> None:
    bad = {m for m in names_imported_by(ROOT / "rlmm" / name) if not within(m, *allowed)}
    assert not bad, f"rlmm/{name} imports {sorted(bad)}"


REPLAY = "rlmm.replay"


@pytest.mark.parametrize("replayer", ["rlmm/manager.py", "rlmm/archive/view.py"])
def test_the_manager_and_the_archive_view_replay_through_one_module(replayer: str) -> None:
    assert any(within(m, REPLAY) for m in names_imported_by(ROOT / replayer)), replayer


def test_only_the_factory_imports_the_concrete_manager() -> None:
    """TopicBasedRemoteLogMetadataManager is built by rlmm.factory alone: the offloader
    (rlmm/offload), ops (rlmm/ops) and every other module type against the ABCs
    (RemoteLogMetadataManager, OffloadMetadataManager), never the concrete class."""
    concrete = ("rlmm.manager", "rlmm.TopicBasedRemoteLogMetadataManager", "rlmm.ManagerStats")
    checked = set()
    for path in modules("rlmm"):
        own = module_name(path)
        if own in ("rlmm.factory", "rlmm.manager"):
            continue
        checked.add(own)
        bad = {m for m in names_imported_by(path) if within(m, *concrete)}
        assert not bad, f"{own} imports {sorted(bad)}"
    assert {"rlmm.offload.remote_log_manager", "rlmm.offload.sidecar", "rlmm.ops.repair"} <= checked


def _calls(node: ast.AST) -> set[str]:
    return {
        call.func.id if isinstance(call.func, ast.Name) else call.func.attr
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name | ast.Attribute)
    }


def test_no_module_but_the_replay_has_an_apply_body() -> None:
    """What turns records into a store's state is rlmm.replay's alone (the cache's own
    lazy restore aside): elsewhere in the project no function asks the store whether an
    event is a redelivery, or decodes a record and applies an event."""
    for path in modules("rlmm"):
        own = module_name(path)
        if own == REPLAY or within(own, "rlmm.cache"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                calls = _calls(node)
                where = f"{own}.{node.name}"
                assert "is_redelivery" not in calls, f"{where} deduplicates events itself"
                assert not {"decode", "apply"} <= calls, f"{where} decodes and applies itself"


def test_the_codec_imports_nothing_of_the_cache() -> None:
    for path in modules("rlmm/codec"):
        bad = {m for m in names_imported_by(path) if not within(m, *LEAF, FAST_PATHS, "rlmm.codec")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_cache_imports_only_the_codec_s_public_surface() -> None:
    for path in modules("rlmm/cache"):
        bad = {
            m
            for m in names_imported_by(path)
            if not within(m, *LEAF, FAST_PATHS, "rlmm.cache", "rlmm.codec")
            or private_part(m, "rlmm.codec")
        }
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", ["rlmm.codec", "rlmm.cache"])
def test_nothing_else_imports_the_private_modules_of(package: str) -> None:
    for top in PACKAGES:
        for path in modules(top):
            own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if within(own, package):
                continue
            bad = {m for m in names_imported_by(path) if private_part(m, package)}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_nothing_imports_the_outer_layer() -> None:
    for package in PACKAGES:
        for path in modules(package):
            own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for m in imports_of(path):
                outer = next((o for o in OUTER if m == o or m.startswith(o + ".")), None)
                if outer is not None and not own.startswith(outer):
                    importer = next((o for o in OUTER if own.startswith(o)), own)
                    assert (importer, outer) in OUTER_ALLOWED, f"{own} imports the outer layer {m}"


def test_the_process_housekeeping_imports_nothing_of_the_project() -> None:
    """rlmm.process (heap freezing, glibc's malloc, their costs) is a leaf: any
    long-running process of the outer layer can take it without the rest."""
    for path in modules("rlmm/process"):
        bad = {m for m in names_imported_by(path) if not within(m, "rlmm.process")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_core_and_the_archive_do_not_import_the_ops_library() -> None:
    """rlmm.ops sits above the core and the archive, below the users."""
    core = (ROOT / "rlmm", ROOT / "rlmm" / "codec", ROOT / "rlmm" / "cache")
    below = [p for p in modules("rlmm") if p.parent in core or "archive" in p.parts]
    for path in below:
        bad = {m for m in imports_of(path) if m == "rlmm.ops" or m.startswith("rlmm.ops.")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("module", ["rlmm.cli", "rlmm.offload.sidecar", "rlmm.spark.source"])
def test_what_only_plans_or_lists_does_not_load_pyarrow(module: str) -> None:
    """The CLI (every command starts through it), the sidecar and the Spark source's
    driver side load pyarrow only when records are decoded."""
    probe = f"import sys, {module}; print(sorted(m for m in sys.modules if m == 'pyarrow'))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", f"importing {module} loads pyarrow"


def _backend_modules() -> set[str]:
    paths = [*EVENT_LOG_BACKENDS.values(), *SNAPSHOT_STORE_BACKENDS.values()]
    for entry in REMOTE_TYPES.values():
        paths += [entry.layout, *([entry.storage_manager] if entry.storage_manager else [])]
    return {path.partition(":")[0] for path in paths}


BACKENDS = _backend_modules()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_registries_name_real_backend_modules() -> None:
    assert {"remote.local", "remote.s3", "remote.layouts.aiven_s3", "eventlog.kafka"} <= BACKENDS
    for name in BACKENDS:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


@pytest.mark.parametrize("package", ["eventlog", "snapshot", "remote"])
def test_no_module_of_a_backends_package_imports_a_backend(package: str) -> None:
    """A backend imports only base modules and helpers; the ABC's module, the registry
    and the package's __init__ import none (the registry names them as text and loads
    them when their type is used)."""
    for path in modules(package):
        own = module_name(path)
        bad = {m for m in imports_of(path) if m in BACKENDS and m != own}
        assert not bad, f"{own} imports the backend(s) {sorted(bad)}"


def test_only_the_factory_builds_remote_storage_and_snapshot_stores() -> None:
    """rlmm.factory is the one place config turns into objects: no other module of rlmm
    imports a remote or snapshot backend, or builds an S3 client or a layout."""
    builders = {
        "make_client",
        "make_s3_client",
        "load_remote_layout",
        "load_remote_storage_manager",
    }
    for path in modules("rlmm"):
        own = module_name(path)
        if own == "rlmm.factory":
            continue
        backends = {m for m in imports_of(path) if m in BACKENDS and m.split(".")[0] != "eventlog"}
        assert not backends, f"{own} imports the backend(s) {sorted(backends)}"
        calls = {
            node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
        }
        assert not calls & builders, f"{own} calls {sorted(calls & builders)}"


# The modules outside eventlog that may import the kafka event log's backend module:
# none, for rlmm.factory builds every event log through eventlog.registry. A Kafka
# client of rlmm's own (the offloader's leadership client, restore's clients) takes
# the client layer they share with the backend, eventlog.kafka_client.
KAFKA_BACKEND = "eventlog.kafka"
KAFKA_BACKEND_IMPORTERS: frozenset[str] = frozenset()


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "eventlog"])
def test_only_eventlog_imports_the_kafka_backend_module(package: str) -> None:
    checked = set()
    for path in modules(package):
        own = module_name(path)
        if own in KAFKA_BACKEND_IMPORTERS:
            continue
        checked.add(own)
        bad = {m for m in names_imported_by(path) if within(m, KAFKA_BACKEND)}
        assert not bad, (
            f"{own} imports {sorted(bad)}: the Kafka client layer is eventlog.kafka_client"
        )
    if package == "rlmm":
        assert {"rlmm.offload.cluster", "rlmm.offload.sidecar", "rlmm.restore"} <= checked


# --- what an event log type is asked, and no cycle closed by a deferred import -------------

EVENT_LOG_TYPE_NAMES = frozenset(EVENT_LOG_BACKENDS)
KIND_NAMERS = {"rlmm.factory"}  # the one module above the backends that may name a type


def _kind_names_compared(path: Path) -> list[str]:
    """The comparisons and match cases of ``path`` against an event log type's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            seqs = ast.Tuple | ast.List | ast.Set
            values = [e for s in sides for e in (s.elts if isinstance(s, seqs) else [s])]
        elif isinstance(node, ast.MatchValue):
            values = [node.value]
        else:
            continue
        if any(isinstance(v, ast.Constant) and v.value in EVENT_LOG_TYPE_NAMES for v in values):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_eventlog_and_the_factory_compares_an_event_log_type_name() -> None:
    """An event log type declares what it can do (``shared``, ``directory_option``,
    ``kafka_client``, ``read_only_options``): a caller asks that, never which type it is."""
    found = [
        hit
        for package in PACKAGES
        if package != "eventlog"
        for path in modules(package)
        if module_name(path) not in KIND_NAMERS
        for hit in _kind_names_compared(path)
    ]
    assert not found, "\n".join(found)


def _import_edges(path: Path) -> dict[str, bool]:
    """The project modules ``path`` imports, each with True when only from inside a
    function (a deferred import); imports under ``if TYPE_CHECKING`` are left out."""
    known = {module_name(p) for package in PACKAGES for p in modules(package)}

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    own = module_name(path)
    edges: dict[str, bool] = {}

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{alias.name}" for alias in child.names]
            for name in names:
                target = resolve(name) if name.split(".")[0] in PACKAGES else None
                if target and target != own:
                    edges[target] = edges.get(target, True) and inner
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return edges


def test_no_deferred_import_closes_an_import_cycle() -> None:
    """An import inside a function loads a module only when it is used; it must not
    hide a cycle (the builder imported back by what it builds): the module it imports
    does not import, by any path, the module the import is in."""
    graph = {module_name(p): _import_edges(p) for package in PACKAGES for p in modules(package)}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                todo += graph.get(name, {})
        return False

    cycles = [
        f"{importer} -> {imported} (deferred), and back"
        for importer, edges in graph.items()
        for imported, deferred in edges.items()
        if deferred and reaches(imported, importer)
    ]
    assert not cycles, "\n".join(cycles)
