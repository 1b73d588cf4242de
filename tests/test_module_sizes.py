"""No big rooms: a production module is at most 600 lines and a function at most 80.

A module of rlmm, remote, eventlog or snapshot over MAX_MODULE_LINES, or with a
function (or method) over MAX_FUNCTION_LINES from its ``def`` to its last line, fails,
unless its docstring says why it must be one piece: a paragraph starting "One piece:"
(that names the function, for a function). The modules other engineers are splitting
now are listed in ALLOWLIST; an entry that is no longer too big fails too, so the list
only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlmm", "remote", "eventlog", "snapshot")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MODULE = "<module>"  # an ALLOWLIST entry for the module's own length

# file -> what may stay too big for now: MODULE and/or "Class.function" names.
ALLOWLIST: dict[str, set[str]] = {}


def one_piece_paragraphs(tree: ast.Module) -> list[str]:
    doc = ast.get_docstring(tree) or ""
    return [" ".join(p.split()) for p in doc.split("\n\n") if p.lstrip().startswith("One piece:")]


def functions(tree: ast.Module) -> list[tuple[str, int]]:
    """Every function and method, by qualified name, with its length in lines."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def big_rooms() -> dict[str, dict[str, str]]:
    """file -> {what: why it is too big}, for every file of the packages."""
    rooms: dict[str, dict[str, str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            tree = ast.parse(text, str(path))
            found: dict[str, str] = {}
            lines = len(text.splitlines())
            if lines > MAX_MODULE_LINES:
                found[MODULE] = f"{lines} lines"
            for name, length in functions(tree):
                if length > MAX_FUNCTION_LINES:
                    found[name] = f"{length} lines"
            if found:
                rooms[str(path.relative_to(ROOT))] = found
    return rooms


def covered(what: str, paragraphs: list[str]) -> bool:
    """Whether a "One piece:" paragraph speaks for ``what`` (the module: any does)."""
    if what == MODULE:
        return bool(paragraphs)
    name = what.rsplit(".", 1)[-1]
    return any(name in p for p in paragraphs)


def unexplained(rooms: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """What is too big without a "One piece:" paragraph covering it."""
    out: dict[str, dict[str, str]] = {}
    for file, found in rooms.items():
        paragraphs = one_piece_paragraphs(ast.parse((ROOT / file).read_text()))
        for what, why in found.items():
            if not covered(what, paragraphs):
                out.setdefault(file, {})[what] = why
    return out


def test_no_module_or_function_is_too_big_without_saying_why() -> None:
    left = unexplained(big_rooms())
    over = {
        file: {what: why for what, why in found.items() if what not in ALLOWLIST.get(file, set())}
        for file, found in left.items()
    }
    over = {file: found for file, found in over.items() if found}
    assert not over, (
        f"too big (modules over {MAX_MODULE_LINES} lines, functions over"
        f" {MAX_FUNCTION_LINES}): {over}; split them, or say in the module's docstring,"
        " in a paragraph starting 'One piece:', why one must stay whole"
    )


def test_the_allowlist_only_shrinks() -> None:
    left = unexplained(big_rooms())
    stale = {
        file: sorted(allowed - set(left.get(file, {})))
        for file, allowed in ALLOWLIST.items()
        if allowed - set(left.get(file, {}))
    }
    assert not stale, f"no longer too big: remove them from ALLOWLIST: {stale}"


def test_the_checks_see_a_big_room_and_its_reason() -> None:
    """The measures themselves, on a module written here."""
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    doc = '"""Doc.\n\nOne piece: long_one is a table.\n"""\n'
    tree = ast.parse(f"{doc}\n\nclass C:\n    def long_one(self):\n{body}")
    assert dict(functions(tree)) == {"C.long_one": MAX_FUNCTION_LINES + 1}
    paragraphs = one_piece_paragraphs(tree)
    assert paragraphs == ["One piece: long_one is a table."]
    assert covered("C.long_one", paragraphs) and covered(MODULE, paragraphs)
    assert not covered("C.other", paragraphs)
    assert one_piece_paragraphs(ast.parse('"""Doc. One piece: not a paragraph."""')) == []
