"""The one door to the worker (feedback.enqueue): tasks sit at the leaf of the import graph."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
import uuid
from pathlib import Path

from feedback import enqueue

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rms", "feedback", "dashboard", "delivery")


def _imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function, as dotted names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_nothing_but_the_enqueue_module_imports_the_tasks():
    importers = sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "feedback.tasks" in _imports_of(path)
    )
    assert importers == ["feedback/enqueue.py"]


def test_the_domain_modules_load_without_the_tasks():
    code = (
        "import django, sys; django.setup()\n"
        "import feedback.ingest, feedback.sweep, feedback.taskruns, feedback.suite, "
        "feedback.services, feedback.enqueue\n"
        "assert 'feedback.tasks' not in sys.modules"
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "rms.settings",
        "RMS_DEVELOPMENT": "true",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env=env)


def test_sweep_objects_sends_string_ids_with_one_quick_retry(monkeypatch):
    sent = []
    fake = types.ModuleType("feedback.tasks")
    fake.sweep_objects = types.SimpleNamespace(
        apply_async=lambda args, **options: sent.append((args, options["retry_policy"]))
    )
    monkeypatch.setitem(sys.modules, "feedback.tasks", fake)
    oid = uuid.uuid4()
    enqueue.sweep_objects([oid])
    enqueue.sweep_objects([])  # nothing to send
    assert sent == [(([str(oid)],), enqueue.PUBLISH_RETRY)]
    assert enqueue.PUBLISH_RETRY["max_retries"] == 1


def test_sweep_objects_without_the_task_module_logs_and_returns(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "feedback.tasks", None)  # import raises ImportError
    enqueue.sweep_objects([uuid.uuid4()])
    assert "unavailable" in caplog.text


def test_run_task_sends_the_run_id_as_text(monkeypatch):
    sent = []
    fake = types.ModuleType("feedback.tasks")
    fake.run_task = types.SimpleNamespace(
        apply_async=lambda args, **options: sent.append((args, options["retry"]))
    )
    monkeypatch.setitem(sys.modules, "feedback.tasks", fake)
    run_id = uuid.uuid4()
    enqueue.run_task(run_id)
    assert sent == [((str(run_id),), True)]
