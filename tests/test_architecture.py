"""The package's shape: no import cycle, a pure protocol layer, no private pyarrow entry point, no
dependency it dropped, and the `delta` library free of Airflow."""

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
            names = [base] + [f"{base}.{a.name}" for a in node.names]
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
