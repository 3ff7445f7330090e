"""The modules of simsci.data import each other at top level and one way only."""

import ast
from pathlib import Path

import simsci.data

PACKAGE = Path(simsci.data.__file__).parent


def _imports(path: Path) -> tuple[set[str], list[int]]:
    """Sibling modules a module imports, and lines of simsci imports inside functions."""
    tree = ast.parse(path.read_text())
    siblings, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        siblings |= {n.split(".")[2] for n in names if n.startswith("simsci.data._")}
        if node.col_offset > 0 and any(n.startswith("simsci") for n in names):
            nested.append(node.lineno)
    return siblings, nested


def test_no_cycles_and_no_hidden_imports():
    graph = {}
    for path in sorted(PACKAGE.glob("_*.py")):
        siblings, nested = _imports(path)
        assert not nested, f"{path.name}: simsci imports inside functions at lines {nested}"
        graph[path.stem] = siblings - {path.stem}
    done, active = set(), []

    def visit(module):
        assert module not in active, f"import cycle: {' -> '.join([*active, module])}"
        if module in done:
            return
        active.append(module)
        for dep in sorted(graph.get(module, ())):
            visit(dep)
        active.pop()
        done.add(module)

    for module in graph:
        visit(module)
    assert "_check" in graph["_reader"] and "_header" in graph["_check"]
