"""The runtime's import graph (issue 18): no import cycle among its modules, type-checking
imports included. import-linter's acyclic_siblings contract checks the same between sibling
packages and modules; this names the modules of any loop, one by one."""

from __future__ import annotations

from collections.abc import Iterator

import grimp

RUNTIME = "warren.runtime"


def loops() -> list[set[str]]:
    """The runtime's strongly connected components of more than one module."""
    graph = grimp.build_graph("warren", include_external_packages=False)
    modules = sorted(m for m in graph.modules if m.startswith(RUNTIME + "."))
    edges = {
        m: sorted(
            i for i in graph.find_modules_directly_imported_by(m) if i.startswith(RUNTIME + ".")
        )
        for m in modules
    }
    return [c for c in _components(modules, edges) if len(c) > 1]


def _components(modules: list[str], edges: dict[str, list[str]]) -> Iterator[set[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges.get(module, []):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            found.append(component)

    for module in modules:
        if module not in index:
            visit(module)
    return iter(found)


def test_no_runtime_module_is_in_an_import_cycle() -> None:
    assert [sorted(loop) for loop in loops()] == []
