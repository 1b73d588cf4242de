"""The remote storage registry: every ``remote.type``, its classes and its settings.

``REMOTE_TYPES`` maps each built-in type name to the RemoteLayout that reads it, the
RemoteStorageManager that writes it (rlmm's own layout only; a Kafka cluster's own
tier is read as it is) and the object-name ending that only that layout writes. Other
packages add types as entry points of the group ``rlmm.remote_stores`` (the entry
point's name is the type; its value a RemoteStorageManager subclass, which writes
rlmm's layout, or a ``RemoteType``), as fsspec's ``fsspec.specs`` do. The factories
(``load_remote_storage_manager``, ``load_remote_layout``), the config check
(``check_remote_options``, ``known_options``) and the layout detection
(``check_layout_matches``) all read this module: a new built-in backend is one module
plus one entry here, a third-party one an entry point.

Invariants:
- this module imports no backend at import time: classes are named ``module:Class``
  and imported when their type is used, so boto3 loads only for an S3 type; an
  installed type's package is imported only when its type is asked for;
- a built-in name wins over an installed one;
- no other module switches on a type name;
- a configuration error is one ConfigError line naming the setting and, for an
  unknown type or key, listing the known ones (an unknown type: the built-in ones
  and those installed in the entry point group; one that does not load: its
  distribution and the error).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from rlmm.errors import ConfigError

if TYPE_CHECKING:
    from remote.layouts import RemoteLayout
    from remote.storage import RemoteStorageManager

# The entry point group through which other packages install remote types.
ENTRY_POINT_GROUP = "rlmm.remote_stores"
# rlmm's own layout, which every type rlmm writes is read back through, and the
# object-name ending only it writes.
_RLMM_LAYOUT = "remote.layouts.rlmm_layout:RlmmLayout"
_RLMM_SIGNATURE = ".leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class RemoteType:
    """One ``remote.type``: where its classes live and how to tell its objects apart."""

    name: str
    layout: str  # "module:Class" of the RemoteLayout that reads it
    # "module:Class" of the RemoteStorageManager that writes it; None: a Kafka cluster's
    # own remote tier, which rlmm reads but never writes.
    storage_manager: str | None = None
    # An object-name ending only this layout writes: tells a misconfigured type from a
    # store that is merely empty or foreign.
    signature: str = ""
    # Settings that are local filesystem paths (made absolute before they travel to
    # another process, such as a Spark executor).
    paths: tuple[str, ...] = ()

    @classmethod
    def writing_rlmm_layout(
        cls, name: str, storage_manager: str, *, paths: tuple[str, ...] = ()
    ) -> RemoteType:
        """A type whose RemoteStorageManager (``module:Class``) writes rlmm's own layout,
        read back through it."""
        return cls(name, _RLMM_LAYOUT, storage_manager, _RLMM_SIGNATURE, paths)

    @property
    def read_only(self) -> bool:
        return self.storage_manager is None

    def layout_class(self) -> type[RemoteLayout]:
        cls: type[RemoteLayout] = self._load(self.layout)
        return cls

    def storage_manager_class(self) -> type[RemoteStorageManager]:
        assert self.storage_manager is not None, f"{self.name} is read only"
        cls: type[RemoteStorageManager] = self._load(self.storage_manager)
        return cls

    def known_options(self) -> frozenset[str] | None:
        """The settings of this type besides ``type``: the RemoteStorageManager's
        constructor arguments, or the read-only layout's own; None when they are
        open-ended (the layout's ``check_options`` checks them)."""
        if self.storage_manager is not None:
            return _constructor_keys(self.storage_manager_class())
        return self.layout_class().known_options()

    def _load(self, path: str) -> Any:
        module, _, name = path.partition(":")
        try:
            return functools.reduce(getattr, name.split("."), importlib.import_module(module))
        except ImportError as e:  # pragma: no cover - every backend's dependency is core
            raise ConfigError(
                f"remote.type = {self.name!r} needs {module}, which cannot be imported: {e}"
            ) from e


REMOTE_TYPES: Mapping[str, RemoteType] = {
    t.name: t
    for t in (
        RemoteType.writing_rlmm_layout(
            "local", "remote.local:LocalRemoteStorageManager", paths=("root",)
        ),
        RemoteType.writing_rlmm_layout("s3", "remote.s3:S3RemoteStorageManager"),
        RemoteType(
            "local-tiered-storage",
            "remote.layouts.local_tiered_storage:LocalTieredStorageLayout",
            signature=".leader_epoch_checkpoint",
            paths=("dir",),
        ),
        RemoteType(
            "aiven-s3",
            "remote.layouts.aiven_s3:AivenS3Layout",
            signature=".rsm-manifest",
        ),
    )
}
LAYOUT_TYPES = tuple(REMOTE_TYPES)
READ_ONLY_TYPES = tuple(t.name for t in REMOTE_TYPES.values() if t.read_only)
_WRITABLE_TYPES = tuple(t.name for t in REMOTE_TYPES.values() if not t.read_only)


def remote_type(kind: str) -> RemoteType:
    """The registry entry of ``remote.type = kind``: a built-in one, else the entry point
    of that name in ``ENTRY_POINT_GROUP``; ConfigError listing the known ones."""
    entry = REMOTE_TYPES.get(kind) if isinstance(kind, str) else None
    if entry is not None:
        return entry
    found = entry_points(group=ENTRY_POINT_GROUP, name=kind)
    if not found:
        installed = sorted(installed_types()) or ["none"]
        raise ConfigError(
            f"unknown remote.type {kind!r} (expected one of {LAYOUT_TYPES};"
            f" installed as entry points of {ENTRY_POINT_GROUP}: {', '.join(installed)})"
        )
    return _installed_type(next(iter(found)))


def installed_types() -> tuple[str, ...]:
    """The remote types other packages install (entry points of ``ENTRY_POINT_GROUP``;
    a built-in name among them stays the built-in)."""
    return tuple(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def _installed_type(ep: EntryPoint) -> RemoteType:
    """The RemoteType an entry point gives: its own, or for a RemoteStorageManager
    subclass, that class writing rlmm's layout under the entry point's name."""
    from remote.storage import RemoteStorageManager

    where = f"remote.type = {ep.name!r} ({ep.value}, entry point of {ep.group}"
    if ep.dist is not None:
        where += f" in {ep.dist.name} {ep.dist.version}"
    try:
        loaded = ep.load()
    except Exception as e:  # whatever the package's import raises
        raise ConfigError(f"{where}) failed to load: {type(e).__name__}: {e}") from e
    if isinstance(loaded, type) and issubclass(loaded, RemoteStorageManager):
        return RemoteType.writing_rlmm_layout(ep.name, ep.value)
    if isinstance(loaded, RemoteType) and loaded.name == ep.name:
        return loaded
    raise ConfigError(
        f"{where}) is {loaded!r}: neither a RemoteStorageManager subclass nor a"
        f" remote.registry.RemoteType named {ep.name!r}"
    )


def known_options(kind: str) -> frozenset[str] | None:
    """The ``[remote]`` settings of one type (see ``RemoteType.known_options``)."""
    return remote_type(kind).known_options()


def check_remote_options(options: Mapping[str, Any]) -> None:
    """ConfigError, one line naming the key and the known ones, for a ``[remote]``
    setting its type does not take (a typo, or another type's setting), or a value of
    another kind than the setting's default."""
    entry = remote_type(options.get("type", "local"))
    known = entry.known_options()
    if known is None:
        entry.layout_class().check_options(options)
        return
    for key in sorted(set(options) - known - {"type"}):
        owners = [
            t.name
            for t in REMOTE_TYPES.values()
            if t is not entry and key in (t.known_options() or ())
        ]
        where = f" (a setting of remote.type = {owners[0]!r})" if owners else ""
        raise ConfigError(
            f"unknown setting remote.{key} for remote.type = {entry.name!r}{where};"
            f" known: {', '.join(sorted(known))}"
        )
    if entry.storage_manager is not None:
        _check_types(entry.storage_manager_class(), options)


def load_remote_storage_manager(config: Mapping[str, Any]) -> RemoteStorageManager:
    """Build the configured RemoteStorageManager: ``config["type"]`` is ``local``
    (default), ``s3`` or an installed type that writes; the other keys are its
    constructor's arguments (``root`` for local; ``bucket``, ``prefix``,
    ``endpoint_url``, ... for s3)."""
    options = dict(config)
    kind = options.pop("type", "local")
    entry = remote_type(kind)
    if entry.read_only:
        raise ConfigError(
            f"remote.type = {kind!r} is a Kafka cluster's own remote tier, read as it is:"
            " rlmm reads it but never copies into it (the offloader writes rlmm's layout:"
            f" remote.type = {' or '.join(repr(t) for t in _WRITABLE_TYPES)})"
        )
    try:
        return entry.storage_manager_class()(**options)
    except TypeError as e:
        raise ConfigError(f"bad remote storage config for type {kind!r}: {e}") from e


def load_remote_layout(config: Mapping[str, Any]) -> RemoteLayout:
    """Build the read side of the configured ``[remote]`` settings: for a type rlmm
    writes, its layout over the RemoteStorageManager of that type; for a Kafka
    cluster's own tier, the layout built from the settings (``dir`` for
    ``local-tiered-storage``; the bucket and the plugin's own names for ``aiven-s3``)."""
    options = dict(config)
    entry = remote_type(options.pop("type", "local"))
    if entry.read_only:
        return entry.layout_class().from_options(options)
    rsm = load_remote_storage_manager({"type": entry.name, **options})
    return entry.layout_class().over(rsm, entry.name)


def detect_layouts(
    names: Iterable[str], also: RemoteType | None = None
) -> dict[tuple[str, ...], str]:
    """The layouts (by the types that write them) whose signature some name carries,
    each with the first such name: the built-in types', and ``also``'s (an installed
    type)."""
    types = [*REMOTE_TYPES.values()]
    if also is not None and also.name not in REMOTE_TYPES:
        types.append(also)
    signatures: dict[str, tuple[str, ...]] = {}
    for t in types:
        if t.signature:
            signatures[t.signature] = (*signatures.get(t.signature, ()), t.name)
    found: dict[tuple[str, ...], str] = {}
    for name in names:
        for ending, kinds in signatures.items():
            if name.endswith(ending):
                found.setdefault(kinds, name)
    return found


def check_layout_matches(layout: RemoteLayout, names: Iterable[str]) -> None:
    """Raise ConfigError (one line, naming an object) when ``names`` carry another
    layout's signature and none of ``layout``'s own (a misconfigured ``remote.type``)."""
    names = list(names)
    found = detect_layouts(names)
    if found and layout.type_name not in REMOTE_TYPES:  # an installed type's own layout
        found = detect_layouts(names, remote_type(layout.type_name))
    if not found or any(layout.type_name in kinds for kinds in found):
        return
    kinds, name = next(iter(found.items()))
    raise ConfigError(
        f"remote.type = {layout.type_name!r}, but {name} is in the {' or '.join(kinds)}"
        f" layout and nothing stored is in the {layout.type_name!r} one: set remote.type to"
        " the layout the brokers' RemoteStorageManager writes"
    )


def _constructor_keys(factory: Callable[..., object]) -> frozenset[str]:
    params = inspect.signature(factory).parameters.values()
    return frozenset(p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD)


def _check_types(factory: Callable[..., object], options: Mapping[str, Any]) -> None:
    """ConfigError naming the key for a value of another kind than the setting's
    default (``max_attempts = "3"`` in TOML is a string, not a number)."""
    for param in inspect.signature(factory).parameters.values():
        if param.name not in options or param.default in (None, inspect.Parameter.empty):
            continue
        value, default = options[param.name], param.default
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = isinstance(value, int) and not isinstance(value, bool), "a whole number"
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "a number"
        else:
            ok, kind = isinstance(value, type(default)), type(default).__name__
        if not ok:
            raise ConfigError(
                f"remote.{param.name} must be {kind}, got {value!r}"
                + (" (unquote it in the TOML file)" if isinstance(value, str) else "")
            )


__all__ = [
    "ENTRY_POINT_GROUP",
    "LAYOUT_TYPES",
    "READ_ONLY_TYPES",
    "REMOTE_TYPES",
    "RemoteType",
    "check_layout_matches",
    "check_remote_options",
    "detect_layouts",
    "installed_types",
    "known_options",
    "load_remote_layout",
    "load_remote_storage_manager",
    "remote_type",
]
