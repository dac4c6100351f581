"""The task-runs room has no import cycle, counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rms", "feedback", "taskruns", "analysis", "dashboard", "delivery", "otlp")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Project module → the project modules it imports, at the top or inside a function (an
    import of ``a.b.c`` also runs the packages ``a`` and ``a.b``)."""
    modules = {
        _module_name(path, root): path
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.add(base)
                targets |= {f"{base}.{alias.name}" for alias in node.names}
        edges = set()
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in modules and prefix != name:
                    edges.add(prefix)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_cycle_passes_through_task_runs_or_a_task_module():
    involved = [
        component
        for component in cycles(import_graph())
        if any(m.split(".")[0] == "taskruns" or m.endswith(".tasks") for m in component)
    ]
    assert involved == []


def test_the_walker_sees_an_import_inside_a_function(tmp_path):
    package = tmp_path / "feedback"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from feedback import b\n")
    (package / "b.py").write_text("def f():\n    from feedback.a import x\n")
    for other in PACKAGES:
        (tmp_path / other).mkdir(exist_ok=True)
    assert cycles(import_graph(tmp_path)) == [["feedback.a", "feedback.b"]]


def test_the_enqueue_door_imports_no_service_and_no_task_module():
    graph = import_graph()
    assert graph["taskruns.enqueue"] <= {"taskruns", "rms", "rms.celery"}


#: The room's modules leaf first, as its ``__init__`` lists them; the app config on top.
LAYERS = (
    "models",
    "enqueue",
    "heartbeat",
    "claims",
    "kinds",
    "chunks",
    "runs",
    "selectors",
    "tasks",
    "apps",
)


def test_each_task_runs_module_imports_only_those_below_it():
    graph = import_graph()
    modules = {m for m in graph if m.startswith("taskruns.")}
    assert modules == {f"taskruns.{name}" for name in LAYERS}
    upward = [
        (module, target)
        for module in sorted(modules)
        for target in graph[module]
        if target.startswith("taskruns.")
        and LAYERS.index(target.split(".")[1]) >= LAYERS.index(module.split(".")[1])
    ]
    assert upward == []
