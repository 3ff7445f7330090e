"""docs/format.md documents every name the format code knows, and its examples run.

The names come from the code itself, so a field, kind, attribute or checker rule added
to simsci.data without a line in docs/format.md fails here:

- the schema module's tables (kinds, root attributes, reserved episode fields, padded
  and bool fields, split names, format name and version);
- the field, group-member and attribute names the format's own modules (every module
  of simsci.data except the importers: writer, checker, header, reader, ...) use as
  string literals, found by walking their syntax trees (``steps["mark"]``,
  ``"steps/agents_valid"``, ``attrs["num_marks"]``, ``name == "params"``, ...);
- the rule ids the checker and reader report;
- the per-episode data fields the event models read (``DATA_FIELDS``).

A name counts as documented when it appears as inline code, e.g. `` `loc_id` ``.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import simsci.data
from simsci.data import _schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
TEXT = DOC.read_text(encoding="utf-8") if DOC.exists() else ""

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GROUPS = ("steps", "episodes", "graphs", "stats", "static")
#: variable names the format modules use for dicts keyed by field / member names
_DICTS = frozenset({"steps", "eps", "episode", "ep", "graph", "nodes", "edges"})
#: loop and comparison variables that range over field / member / attribute names
_NAME_VARS = frozenset({"name", "key", "part", "what", "k"})


def _documented(name: str) -> bool:
    return f"`{name}`" in TEXT


def _missing(names) -> list[str]:
    return sorted(n for n in set(names) if not _documented(n))


def _is_dict(node) -> bool:
    return (isinstance(node, ast.Name) and node.id in _DICTS) or (
        isinstance(node, ast.Attribute) and node.attr == "attrs"
    )


def _strings(node) -> list[str]:
    """String constants of a constant or a tuple/list of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


def _loop_names(node: ast.For) -> list[str]:
    """``for name, x in (("node_offsets", a), ...)`` / ``for part in ("nodes", "edges")``."""
    target = node.target
    first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
    if not (isinstance(first, ast.Name) and first.id in _NAME_VARS):
        return []
    if not isinstance(node.iter, (ast.Tuple, ast.List)):
        return []
    out = []
    for elt in node.iter.elts:
        if isinstance(elt, (ast.Tuple, ast.List)) and elt.elts:
            out += _strings(elt.elts[0])
        else:
            out += _strings(elt)
    return out


def code_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(field/member/attribute names, rule ids) used as literals in a module's tree."""
    names: set[str] = set()
    rules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split("/")
            if len(parts) >= 2 and parts[0] in _GROUPS and all(map(_IDENT.match, parts)):
                names.update(parts[1:])  # "steps/agents_valid", "graphs/.../edges/index"
        elif isinstance(node, ast.Subscript) and _is_dict(node.value):
            names.update(_strings(node.slice))  # steps["mark"], dset.attrs["num_marks"]
        elif isinstance(node, ast.Compare):
            left = node.left
            for op, comp in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and _is_dict(comp):
                    names.update(_strings(left))  # "mask" in steps
                if isinstance(left, ast.Name) and left.id in _NAME_VARS:
                    names.update(_strings(comp))  # name == "params", name in ("t", ...)
        elif isinstance(node, ast.For):
            names.update(_loop_names(node))
        elif isinstance(node, ast.Call) and node.args:
            func, first = node.func, node.args[0]
            if isinstance(func, ast.Attribute):
                if (
                    func.attr == "get"
                    and isinstance(func.value, ast.Name)
                    and func.value.id in _DICTS
                ):
                    names.update(_strings(first))  # steps.get("x")
                elif func.attr == "create_dataset":
                    names.update(_strings(first))  # create_dataset("offsets", ...)
                elif func.attr == "add":
                    rules.update(_strings(first))  # self.add("t-increasing", ...)
            elif isinstance(func, ast.Name) and func.id == "problem" and len(node.args) >= 2:
                rules.update(_strings(node.args[1]))  # problem(path, "shard-schema", ...)
    return {n for n in names if _IDENT.match(n)}, rules


def _is_importer(tree: ast.Module) -> bool:
    """Importers (import_pdebench, import_aeon, ...) read foreign layouts: their literals
    name the source's fields, not the format's."""
    return any(
        isinstance(node, ast.FunctionDef) and node.name.startswith("import_") for node in tree.body
    )


def _format_modules() -> dict[str, ast.Module]:
    """Every module of simsci.data except the importers, by file name (found on disk,
    so a module added to or split out of the package is scanned too)."""
    out = {}
    for path in sorted(Path(simsci.data.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if not _is_importer(tree):
            out[path.name] = tree
    return out


FORMAT_MODULES = _format_modules()


def test_scanned_modules():
    """The writer and checker are among the scanned modules; importers are not."""
    assert {"_schema.py", "_writer.py", "_check.py", "_reader.py"} <= set(FORMAT_MODULES)
    assert "_easytpp.py" not in FORMAT_MODULES


def test_doc_exists():
    assert DOC.exists(), f"{DOC} is missing"
    assert len(TEXT) > 5000, "docs/format.md looks truncated"


def test_format_name_and_version_documented():
    assert _documented(_schema.FORMAT)
    assert re.search(rf"`format_version`\D{{0,20}}\b{_schema.FORMAT_VERSION}\b", TEXT), (
        f"docs/format.md must state the current format_version ({_schema.FORMAT_VERSION})"
    )


def test_every_kind_documented():
    assert _missing(_schema.KINDS) == []
    for kind in _schema.KINDS:  # each kind has its own section
        assert re.search(rf"^#+ {re.escape(kind)}\s*$", TEXT, flags=re.M), (
            f"docs/format.md has no section heading for kind {kind!r}"
        )


def test_schema_tables_documented():
    names = {
        *_schema.ROOT_ATTRS,
        *_schema.RESERVED_EPISODE_FIELDS,
        *_schema.PADDED_FIELDS,
        *_schema.BOOL_FIELDS,
        *_schema.SPLITS,
    }
    assert _missing(names) == [], "schema names missing from docs/format.md"


def test_writer_checker_reader_names_documented():
    found = set()
    for tree in FORMAT_MODULES.values():
        found |= code_names(tree)[0]
    # the scan must keep finding the core names, or it would pass vacuously
    core = {"t", "x", "mask", "mark", "offsets", "num_marks", "agents", "agents_valid"}
    core |= {"node_offsets", "edge_offsets", "index", "mean", "std", "count", "names"}
    assert core <= found, f"the scan of the format code lost {sorted(core - found)}"
    assert _missing(found) == [], "names used by the writer/checker/reader are undocumented"


def test_checker_rules_documented():
    rules = set()
    for tree in FORMAT_MODULES.values():
        rules |= code_names(tree)[1]
    assert {"t-increasing", "offsets-end", "shard-schema", "mark-range"} <= rules
    assert _missing(rules) == [], "checker rule ids missing from docs/format.md"


def test_event_model_fields_documented():
    """The per-episode values the event models read from kind="events" files."""
    events = importlib.import_module("simsci.models._events")
    fields = getattr(events, "DATA_FIELDS", None)
    assert fields, "simsci.models._events.DATA_FIELDS is gone; update this test"
    assert _missing(fields) == []


EXAMPLES = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def test_doc_has_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_doc_example_runs(index, tmp_path, monkeypatch):
    """Every ```python block of docs/format.md runs as written in an empty directory."""
    monkeypatch.chdir(tmp_path)
    code = compile(EXAMPLES[index], f"docs/format.md example {index}", "exec")
    exec(code, {"__name__": "__doc_example__"})
