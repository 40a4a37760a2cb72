"""The package's shape: imports run down the layers the README states (lazy imports included; only
`TYPE_CHECKING` imports are exempt), no import cycle, a pure protocol layer, no private pyarrow entry
point, no dependency it dropped, and the `delta` library free of Airflow."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_delta_provider"
PYPROJECT = PACKAGE.parent / "pyproject.toml"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Line numbers inside `if TYPE_CHECKING:` blocks (imports there never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(module: str, path: Path) -> set[str]:
    """The package modules `module` imports (lazy imports inside functions included)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            submodules = [f"{base}.{a.name}" for a in node.names]
            # `from pkg import submodule` imports the submodule (and runs pkg's __init__, which the
            # graph does not count as a dependency); any other name comes from `pkg` itself
            names = submodules + ([base] if any(m not in MODULES for m in submodules) else [])
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


#: The layers, lowest first (README "Architecture"). A module may import its own layer and those
#: below it. Names are relative to the package; the longest prefix decides a module's layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "delta.errors", "delta.progress", "delta.protocol", "get_provider_info"),  # "": the root (its version)
    ("delta.storage",),
    ("delta.read", "delta.write", "delta.txn"),
    ("delta.engines",),
    ("delta.snapshot", "delta.delta_log"),
    ("delta.maintenance", "delta.lake"),
    ("delta",),  # the library's public facade (`airflow_delta_provider.delta`)
    ("commands",),
    ("cli", "__main__", "jobs", "hooks", "version_watch", "lineage", "assets", "policies"),
    ("operators", "sensors", "triggers", "plugin", "autopilot"),  # plugin: the report pages in the API server
    ("testing",),  # the testing kit users' tests import
)


def layer_of(module: str) -> int:
    """The index in `LAYERS` of `module` (a dotted name under the package)."""
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            full = f"{PACKAGE.name}.{prefix}" if prefix else PACKAGE.name
            if (module == full or module.startswith(full + ".")) and (best is None or len(full) > best[1]):
                best = (index, len(full))
    assert best is not None, module
    return best[0]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    return sorted((m, i) for m, imported in graph.items() for i in imported if layer_of(i) > layer_of(m))


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_run_down_the_layers():
    assert upward_imports(GRAPH) == []


def test_an_upward_import_is_caught(tmp_path):
    """A planted lazy import of the command layer inside `delta.read`, and a planted cycle, fail the checks."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from ...commands import command\n    return command\n")
    module = f"{PACKAGE.name}.delta.read.planted"
    MODULES[module] = planted
    try:
        graph = {**GRAPH, module: _imports(module, planted)}
    finally:
        del MODULES[module]
    assert f"{PACKAGE.name}.commands.command" in graph[module]
    assert upward_imports(graph) == [(module, f"{PACKAGE.name}.commands.command")]
    engines, read = f"{PACKAGE.name}.delta.engines.local", f"{PACKAGE.name}.delta.read.checkpoint"
    cyclic = {**GRAPH, read: GRAPH[read] | {engines}}
    assert any(engines in c and read in c for c in _cycles(cyclic))


def test_a_type_checking_import_is_exempt(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ...commands import command\n")
    module = f"{PACKAGE.name}.delta.read.planted"
    MODULES[module] = planted
    try:
        assert _imports(module, planted) == set()
    finally:
        del MODULES[module]


def test_cycle_detection_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle():
    assert _cycles(GRAPH) == []


def test_the_delta_library_never_imports_airflow_or_the_provider():
    for module, path in MODULES.items():
        if not module.startswith("airflow_delta_provider.delta"):
            continue
        text = path.read_text()
        assert "import airflow" not in text and "from airflow" not in text, module
        outside = {m for m in GRAPH[module] if not m.startswith("airflow_delta_provider.delta")}
        assert outside == set(), (module, outside)


def test_protocol_is_pure():
    """`delta.protocol` makes decisions over values: it imports no store, reader or engine."""
    for module, imported in GRAPH.items():
        if module.startswith("airflow_delta_provider.delta.protocol"):
            bad = {
                m
                for m in imported
                if m.startswith(
                    (
                        "airflow_delta_provider.delta.storage",
                        "airflow_delta_provider.delta.read",
                        "airflow_delta_provider.delta.engines",
                    )
                )
            }
            assert bad == set(), (module, bad)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_pyarrow_entry_point(module):
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("pyarrow._"), (module, node.module)
            if node.module == "pyarrow":
                assert not any(a.name.startswith("_") for a in node.names), module
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("pyarrow._") for a in node.names), module


def test_cramjam_is_gone():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert not any(d.startswith("cramjam") for d in deps)
    for module, path in MODULES.items():
        assert "cramjam" not in path.read_text(), module


#: A module longer than this says in its docstring why it is one unit (issue 25).
MAX_LINES = 600


def test_a_module_over_600_lines_says_why_it_is_one_unit():
    """Long modules are split along their seams; one that is not says "One unit" and why in its docstring."""
    unexplained = []
    for module, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "One unit" not in doc:
                unexplained.append((module, text.count("\n")))
    assert unexplained == []
