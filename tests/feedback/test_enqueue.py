"""The one door to the worker (``taskruns.enqueue``): tasks are queued by their
registered names, which stay those queued messages and beat entries already carry."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from django.conf import settings

from otlp import services as otlp_services
from rms.celery import app
from taskruns import enqueue, tasks

ROOT = Path(__file__).resolve().parents[2]


def test_the_registered_task_names_are_kept():
    assert {
        tasks.run_task.name, tasks.run_chunk.name, tasks.sweep_objects.name,
        tasks.sweep_all.name, tasks.snapshot_metrics.name, tasks.reconcile_task_runs.name,
    } == {
        "feedback.tasks.run_task", "feedback.tasks.run_chunk", "feedback.tasks.sweep_objects",
        "feedback.tasks.sweep_all", "feedback.tasks.snapshot_metrics",
        "feedback.tasks.reconcile_task_runs",
    }  # fmt: skip
    assert app.tasks[otlp_services.ASSEMBLE_TRACES].name == "otlp.tasks.assemble_traces"


def test_every_beat_entry_names_a_registered_task():
    missing = [
        entry["task"]
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] not in app.tasks
    ]
    assert missing == []


def test_the_web_process_finds_the_tasks_by_name_after_setup():
    code = (
        "import django; django.setup()\n"
        "from rms.celery import app\n"
        "from taskruns import enqueue\n"
        "from otlp import services\n"
        "names = [enqueue.RUN_TASK, enqueue.RUN_CHUNK, enqueue.SWEEP_OBJECTS, "
        "services.ASSEMBLE_TRACES]\n"
        "assert all(name in app.tasks for name in names), names"
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "rms.settings",
        "RMS_DEVELOPMENT": "true",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env=env)


def test_sweep_objects_sends_string_ids_with_one_quick_retry(monkeypatch):
    sent = []
    monkeypatch.setattr(
        tasks.sweep_objects,
        "apply_async",
        lambda args, **options: sent.append((args, options["retry_policy"])),
    )
    oid = uuid.uuid4()
    enqueue.sweep_objects([oid])
    enqueue.sweep_objects([])  # nothing to send
    assert sent == [(([str(oid)],), enqueue.PUBLISH_RETRY)]
    assert enqueue.PUBLISH_RETRY["max_retries"] == 1


def test_sweep_objects_without_the_task_registered_logs_and_returns(monkeypatch, caplog):
    monkeypatch.delitem(app.tasks, enqueue.SWEEP_OBJECTS)
    enqueue.sweep_objects([uuid.uuid4()])
    assert "unavailable" in caplog.text


def test_run_task_sends_the_run_id_as_text(monkeypatch):
    sent = []
    monkeypatch.setattr(
        tasks.run_task, "apply_async", lambda args, **options: sent.append((args, options["retry"]))
    )
    run_id = uuid.uuid4()
    enqueue.run_task(run_id)
    assert sent == [((str(run_id),), True)]


def test_an_otlp_export_queues_its_traces_by_name(monkeypatch):
    from otlp import tasks as otlp_tasks

    sent = []
    monkeypatch.setattr(
        otlp_tasks.assemble_traces, "apply_async", lambda args, **options: sent.append(args)
    )
    otlp_services._enqueue([3, 4])
    assert sent == [([3, 4],)]
