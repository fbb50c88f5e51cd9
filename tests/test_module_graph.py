"""The shape of the code: no import circle between explorer's modules, no function over 80 lines.

Imports are read from the source (ast), so an import inside a function or under ``TYPE_CHECKING`` counts
as much as one at the top: a circle hidden in a function is still two modules that cannot be read, tested
or moved apart. Nothing is imported, so the checks take well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "explorer"

#: Circles not yet split, each as its sorted modules. A new circle fails the test; so does a listed one
#: that is gone (strike it from the list, so that it cannot come back unnoticed).
KNOWN_CIRCLES: set[tuple[str, ...]] = set()

#: Functions longer than the limit, as ``path:name``, not yet split into named steps; same rules as above.
MAX_FUNCTION_LINES = 80
KNOWN_LONG_FUNCTIONS: set[str] = set()


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name, not ``__init__``)."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the explorer modules it imports anywhere in its source (``from pkg import mod`` names mod)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(tuple(sorted(component)))
    return found


def long_functions(modules: dict[str, Path]) -> dict[str, int]:
    """``path:name`` -> line count of every function (or method) longer than :data:`MAX_FUNCTION_LINES`."""
    found = {}
    for path in modules.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(ROOT.parent).as_posix()}:{node.name}"] = lines
    return found


def test_the_circle_finder_sees_a_circle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == {("a", "b", "c")}
    assert circles({"a": {"b"}, "b": set()}) == set()


def test_no_new_import_circle_between_explorer_modules() -> None:
    found = circles(import_graph(module_files()))
    new = found - KNOWN_CIRCLES
    assert not new, f"import circles: {sorted(new)}; move what the modules share into a lower module"
    gone = KNOWN_CIRCLES - found
    assert not gone, f"these circles are split now, strike them from KNOWN_CIRCLES: {sorted(gone)}"


def test_no_function_over_the_line_limit() -> None:
    found = long_functions(module_files())
    new = {name: n for name, n in found.items() if name not in KNOWN_LONG_FUNCTIONS}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines: {new}; split them into named steps"
    gone = KNOWN_LONG_FUNCTIONS - set(found)
    assert not gone, f"these are short now, strike them from KNOWN_LONG_FUNCTIONS: {sorted(gone)}"
