"""The remote storage registry: every ``remote.type``, its classes and its settings.

``REMOTE_TYPES`` maps each type name to the RemoteLayout that reads it, the
RemoteStorageManager that writes it (rlmm's own layout only; a Kafka cluster's own
tier is read as it is) and the object-name ending that only that layout writes. The
factories (``load_remote_storage_manager``, ``load_remote_layout``), the config check
(``check_remote_options``, ``known_options``) and the layout detection
(``check_layout_matches``) all read this table: a new backend is one module plus one
entry here.

Invariants:
- this module imports no backend at import time: classes are named ``module:Class``
  and imported when their type is used, so boto3 loads only for an S3 type;
- no other module switches on a type name;
- a configuration error is one ConfigError line naming the setting and, for an
  unknown type or key, listing the known ones.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlmm.errors import ConfigError

if TYPE_CHECKING:
    from remote.layouts import RemoteLayout
    from remote.storage import RemoteStorageManager


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
            return getattr(importlib.import_module(module), name)
        except ImportError as e:  # pragma: no cover - every backend's dependency is core
            raise ConfigError(
                f"remote.type = {self.name!r} needs {module}, which cannot be imported: {e}"
            ) from e


REMOTE_TYPES: Mapping[str, RemoteType] = {
    t.name: t
    for t in (
        RemoteType(
            "local",
            "remote.layouts.rlmm_layout:RlmmLayout",
            "remote.local:LocalRemoteStorageManager",
            ".leader-epoch-checkpoint",
            paths=("root",),
        ),
        RemoteType(
            "s3",
            "remote.layouts.rlmm_layout:RlmmLayout",
            "remote.s3:S3RemoteStorageManager",
            ".leader-epoch-checkpoint",
        ),
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
    """The registry entry of ``remote.type = kind``; ConfigError listing the known ones."""
    entry = REMOTE_TYPES.get(kind)
    if entry is None:
        raise ConfigError(f"unknown remote.type {kind!r} (expected one of {LAYOUT_TYPES})")
    return entry


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
    (default) or ``s3``; the other keys are its constructor's arguments (``root`` for
    local; ``bucket``, ``prefix``, ``endpoint_url``, ... for s3)."""
    options = dict(config)
    kind = options.pop("type", "local")
    entry = REMOTE_TYPES.get(kind)
    if entry is None:
        raise ConfigError(
            f"unknown remote storage type {kind!r} (expected {' or '.join(_WRITABLE_TYPES)})"
        )
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


def detect_layouts(names: Iterable[str]) -> dict[tuple[str, ...], str]:
    """The layouts (by the types that write them) whose signature some name carries,
    each with the first such name."""
    signatures: dict[str, tuple[str, ...]] = {}
    for t in REMOTE_TYPES.values():
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
    found = detect_layouts(names)
    if not found or any(layout.type_name in kinds for kinds in found):
        return
    kinds, name = next(iter(found.items()))
    raise ConfigError(
        f"remote.type = {layout.type_name!r}, but {name} is in the {' or '.join(kinds)}"
        f" layout and nothing stored is in the {layout.type_name!r} one: set remote.type to"
        " the layout the brokers' RemoteStorageManager writes"
    )


def _constructor_keys(factory: Any) -> frozenset[str]:
    params = inspect.signature(factory).parameters.values()
    return frozenset(p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD)


def _check_types(factory: Any, options: Mapping[str, Any]) -> None:
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
    "LAYOUT_TYPES",
    "READ_ONLY_TYPES",
    "REMOTE_TYPES",
    "RemoteType",
    "check_layout_matches",
    "check_remote_options",
    "detect_layouts",
    "known_options",
    "load_remote_layout",
    "load_remote_storage_manager",
    "remote_type",
]
