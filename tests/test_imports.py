"""Every import arrow points down one total order of the house's folders (``LAYERS``), and no
import cycle hides inside a folder.

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
PACKAGES = ("algorithms", "specjax", "experiments", "benchmarks", "paper_repro")

#: The house, low to high: a module may import modules of its own layer and of layers below.
#: ``specjax`` alone is the package's face (``specjax/__init__.py``); every other module of
#: ``specjax`` sits in one of its folders or is ``registry`` / ``api`` (the root holds nothing
#: else). ``algorithms`` is the pure math: nothing of ``specjax`` under it.
LAYERS = (
    "algorithms",
    "specjax.platform",  # assets, CPU identity, machine probes, compile cache, provenance
    "specjax.prompts",
    "specjax.theory",
    "specjax.eval",  # metrics, results files, bootstrap, the optimum's bound, trackers
    "specjax.models",  # decoders, loaders, kernels, the passes the loop runs, sampling
    "specjax.drafters",
    "specjax.decode",  # the loop, its mesh layout, its time breakdown
    "specjax.registry",
    "specjax.api",
    "specjax",
    "specjax.tuning",  # calls the API (L=auto)
    "specjax.training",
    "experiments",  # Hydra entry points
    "benchmarks",
    "paper_repro",
)


def module_files(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        if not (root / package).is_dir():
            continue
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


def layer_of(module: str) -> int | None:
    """Index in ``LAYERS`` of the deepest layer holding ``module``; None when none does (a
    module at ``specjax``'s root other than the face, or a package not in the house)."""
    best = None
    for i, layer in enumerate(LAYERS):
        if module == layer or (module.startswith(layer + ".") and layer != "specjax"):
            if best is None or len(layer) > len(LAYERS[best]):
                best = i
    return best


def upward_arrows(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every arrow from a layer to a higher one, as ``a (layer) -> b (layer), line n``."""
    bad = []
    for module, out in sorted(graph.items()):
        for target, line in sorted(out.items()):
            lo, hi = layer_of(module), layer_of(target)
            if lo is not None and hi is not None and hi > lo:
                bad.append(f"{module} ({LAYERS[lo]}) -> {target} ({LAYERS[hi]}), line {line}")
    return bad


@pytest.fixture(scope="module")
def graph():
    return module_graph()


def test_every_module_sits_in_one_layer(graph):
    unplaced = sorted(m for m in graph if layer_of(m) is None)
    assert not unplaced, ("modules outside every layer of LAYERS (a module at specjax's root "
                          f"that is not the face?): {unplaced}")


def test_every_import_points_down_the_layers(graph):
    bad = upward_arrows(graph)
    assert not bad, "imports that point up the house:\n" + "\n".join(bad)


def test_an_upward_import_is_found_and_named(tmp_path):
    """Plant an import of the API into a model module: the check names that arrow, its layers
    and its line (and nothing without it)."""
    for package in ("specjax/models", "specjax/platform", "algorithms"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "specjax" / "api.py").write_text("from specjax.models import decoder\n")
    (tmp_path / "specjax" / "models" / "decoder.py").write_text(
        "from specjax.platform import hardware\n")
    (tmp_path / "specjax" / "platform" / "hardware.py").write_text("import os\n")
    assert upward_arrows(module_graph(tmp_path)) == []
    (tmp_path / "specjax" / "models" / "decoder.py").write_text(
        "from specjax.platform import hardware\n\n\ndef f():\n    from specjax.api import x\n")
    assert upward_arrows(module_graph(tmp_path)) == [
        "specjax.models.decoder (specjax.models) -> specjax.api (specjax.api), line 5"]


def test_the_graph_sees_imports_inside_functions(graph):
    # api.py resolves names inside ``_resolve_model``; the arrow must be there.
    assert "specjax.registry" in graph["specjax.api"]
    assert "specjax.drafters.family" in graph["specjax.registry"]


def test_algorithms_import_nothing_from_specjax(graph):
    """The lowest layer, stated on its own: it is the part researchers copy out."""
    bad = [f"{m} -> {t} (line {line})" for m, out in sorted(graph.items())
           if m.split(".")[0] == "algorithms" for t, line in out.items()
           if t.split(".")[0] != "algorithms"]
    assert not bad, "\n".join(bad)


def test_no_import_cycle_inside_specjax(graph):
    inside = {m: {t: line for t, line in out.items() if t.split(".")[0] == "specjax"}
              for m, out in graph.items() if m.split(".")[0] == "specjax"}
    found = cycles(inside)
    assert not found, "\n".join(describe(c, inside) for c in found)


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
