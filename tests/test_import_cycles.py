"""No import circle in federator/.

The graph is built from the source (the AST), not by importing anything: an
edge for every `import` and `from ... import` anywhere in a module (at module
level and inside functions, since a function-level import that closes a circle
is still a circle, only a later one) and for `importlib.import_module("literal")`.
Imports under `if TYPE_CHECKING:` are left out: they never run. Every strongly
connected component with more than one module (Tarjan's algorithm) is a circle;
the failure names one cycle through each, with the line of every import in it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "federator"

#: importing module -> imported module -> the first line that imports it
Graph = dict[str, dict[str, int]]


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Every module of the package (dotted name -> file); a package is its __init__.py."""
    names: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([package, *parts])] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Import statements and import_module calls anywhere under `node`, except in `if TYPE_CHECKING:` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
        yield node
    yield from _import_nodes(node)


def _import_module_target(call: ast.Call) -> str | None:
    func = call.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module"
             and isinstance(func.value, ast.Name) and func.value.id == "importlib") or (
        isinstance(func, ast.Name) and func.id == "import_module")
    if named and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def imports_of(module: str, path: Path, known: Set[str]) -> dict[str, int]:
    """The package's modules that `module` imports, each with the first line doing so."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        # `import a.b.c` needs a.b.c; a name that is no module of ours belongs to the nearest one that is.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != module:
            found.setdefault(target, line)

    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = module.split(".") if is_package else module.split(".")[:-1]
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base, node.lineno)
        elif isinstance(node, ast.Call):
            target = _import_module_target(node)
            if target is not None:
                add(target, node.lineno)
    return found


def import_graph(package_dir: Path, package: str) -> Graph:
    modules = module_names(package_dir, package)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def strongly_connected(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative, so deep graphs do not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, {})))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def one_cycle(graph: Mapping[str, Mapping[str, int]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ not in members:
                    continue
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - Tarjan said there is one


def describe_cycles(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    circles = []
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        cycle = one_cycle(graph, component)
        steps = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
        circles.append(f"{len(component)} modules in a circle ({', '.join(component)}): {steps} -> {cycle[-1]}")
    return circles


def test_federator_has_no_import_circle() -> None:
    graph = import_graph(ROOT / PACKAGE, PACKAGE)
    assert "federator.hub.app" in graph and graph["federator.hub.app"], "the graph found no imports: the test is broken"
    circles = describe_cycles(graph)
    assert not circles, "import circles in federator/:\n" + "\n".join(circles)


def test_the_checker_finds_function_level_circles_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")  # closes a <-> sub.b, late
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n")
    (pkg / "d.py").write_text("import pkg.c\n")  # c -> d only under TYPE_CHECKING: no circle
    (pkg / "e.py").write_text("import importlib\ndef g():\n    importlib.import_module('pkg.f')\n")
    (pkg / "f.py").write_text("from pkg.e import g\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.sub.b"] == {"pkg.a": 2}
    assert graph["pkg.c"] == {}
    assert [c for c in strongly_connected(graph) if len(c) > 1] == [["pkg.a", "pkg.sub.b"], ["pkg.e", "pkg.f"]]
    circles = describe_cycles(graph)
    assert circles[0] == ("2 modules in a circle (pkg.a, pkg.sub.b): pkg.a (line 1) -> pkg.sub.b (line 2) "
                          "-> pkg.a")
