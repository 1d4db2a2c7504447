"""Every import arrow points down: no import cycle inside ``specjax``, and ``algorithms`` (the
pure math) imports nothing from ``specjax``.

The module graph is read from the source (``ast``), not by importing: every ``import`` and
``from ... import`` anywhere in a module counts, also those inside functions (a deferred import
hides a cycle from the interpreter, not from the structure). ``from pkg import name`` is an arrow
to ``pkg.name`` when that is a module, else to ``pkg`` (its ``__init__``); the implicit import of
a module's parent packages is not an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specjax", "algorithms")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> dict[str, int]:
    """{imported module of ``modules``: first line} for one module's source."""
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        while target and target not in modules:  # ``import a.b.c`` of a function, a class ...
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if sub in modules else source, node.lineno)
    return found


def module_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    files = module_files(root)
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, {}):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    arrows = [f"  {a} -> {b} (line {graph[a][b]})" for a in component for b in sorted(graph[a])
              if b in component]
    return "cycle: " + ", ".join(component) + "\n" + "\n".join(arrows)


@pytest.fixture(scope="module")
def graph():
    return module_graph()


def test_the_graph_sees_imports_inside_functions(graph):
    # api.py resolves names inside ``_resolve_model``; the arrow must be there.
    assert "specjax.registry" in graph["specjax.api"]
    assert "specjax.drafters.family" in graph["specjax.registry"]


def test_no_import_cycle_inside_specjax(graph):
    inside = {m: {t: line for t, line in out.items() if t.split(".")[0] == "specjax"}
              for m, out in graph.items() if m.split(".")[0] == "specjax"}
    found = cycles(inside)
    assert not found, "\n".join(describe(c, inside) for c in found)


def test_algorithms_import_nothing_from_specjax(graph):
    bad = [f"{m} -> {t} (line {line})" for m, out in sorted(graph.items())
           if m.split(".")[0] == "algorithms" for t, line in out.items()
           if t.split(".")[0] == "specjax"]
    assert not bad, "\n".join(bad)


def test_models_import_neither_drafters_nor_training(graph):
    bad = [f"{m} -> {t}" for m, out in sorted(graph.items()) if m.startswith("specjax.models")
           for t in out if t.startswith(("specjax.drafters", "specjax.training"))]
    assert not bad, "\n".join(bad)


def test_drafters_do_not_import_training(graph):
    bad = [f"{m} -> {t}" for m, out in sorted(graph.items()) if m.startswith("specjax.drafters")
           for t in out if t.startswith("specjax.training")]
    assert not bad, "\n".join(bad)


def test_a_cycle_is_found_and_named(tmp_path):
    """The checker on a three-module package with a cycle hidden in a function, and a relative
    import: it must report exactly that cycle (and nothing on the same package without it)."""
    pkg = tmp_path / "specjax"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "algorithms").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from specjax.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("def f():\n    from specjax.a import g\n")
    graph = module_graph(tmp_path)
    assert graph["specjax.sub.b"] == {"specjax.sub.c": 1}
    found = cycles(graph)
    assert found == [["specjax.a", "specjax.sub.b", "specjax.sub.c"]]
    assert "specjax.sub.c -> specjax.a (line 2)" in describe(found[0], graph)
    (pkg / "sub" / "c.py").write_text("def f():\n    import json\n")
    assert cycles(module_graph(tmp_path)) == []
