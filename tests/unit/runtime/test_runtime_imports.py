"""The runtime's import graph (issue 18): no import cycle when the runtime runs, and the
queue package (`warren.runtime.queues`) in no cycle at all, type-checking imports included.
import-linter's contracts check the queue package's own edges; this checks the loops."""

from __future__ import annotations

from collections.abc import Iterator

import grimp

RUNTIME = "warren.runtime"
QUEUES = "warren.runtime.queues"


def loops(exclude_type_checking: bool) -> list[set[str]]:
    """The runtime's strongly connected components of more than one module."""
    graph = grimp.build_graph(
        "warren",
        include_external_packages=False,
        exclude_type_checking_imports=exclude_type_checking,
    )
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


def test_the_runtime_has_no_import_cycle_when_it_runs() -> None:
    assert loops(exclude_type_checking=True) == []


def test_no_queue_module_is_in_an_import_cycle() -> None:
    for loop in loops(exclude_type_checking=False):
        assert not any(module.startswith(QUEUES) for module in loop), sorted(loop)
