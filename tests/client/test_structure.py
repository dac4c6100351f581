"""The client's own modules: their imports form no cycle, counting imports inside functions and
under ``TYPE_CHECKING`` (each is an edge a reader has to follow)."""

from __future__ import annotations

import ast
from pathlib import Path

import rms_client

PACKAGE = Path(rms_client.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports, anywhere in its body."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    anchor = name.split(".")[: -node.level or None]
                    base = ".".join([*anchor, node.module])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk meets (empty when the graph is acyclic)."""
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_client_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    assert "rms_client.client" in graph and "rms_client.recorder" in graph
    assert cycles(graph) == []
