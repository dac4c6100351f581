"""Fixtures of the feedback tests: a real Celery worker on the test database.

The worker is ``celery -A rms worker --pool solo`` in a subprocess, on a queue of its own (so it
only ever receives the messages of these tests, whatever else shares the broker), pointed at
the database pytest-django created. Tests that use it need
``@pytest.mark.django_db(transaction=True)`` so the worker sees committed rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from tests.servers import subprocess_database_url

ROOT = Path(__file__).resolve().parents[2]
WORKER_STOP_TIMEOUT = 20


def worker_database_url() -> str:
    """The URL of the database pytest-django set up, for another process."""
    return subprocess_database_url()


class Worker:
    def __init__(self, proc: subprocess.Popen, queue: str, log_path: Path) -> None:
        self.proc = proc
        self.queue = queue
        self.log_path = log_path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the Celery worker exited ({self.proc.returncode}):\n{self.log_tail()}")


@pytest.fixture(scope="module")
def celery_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real worker on a unique queue; the test process sends its tasks to that queue."""
    from rms.celery import app

    queue = f"rms-test-{uuid.uuid4().hex[:12]}"
    with django_db_blocker.unblock():
        url = worker_database_url()
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="rms.settings",
        RMS_VAR_DIR=str(settings.VAR_DIR),  # the same filesystem-broker folders
        PYTHONUNBUFFERED="1",
    )
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "rms", "worker",
            "--pool", "solo", "-Q", queue, "-l", "warning",
            "-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield Worker(proc, queue, log_path)
    finally:
        app.conf.task_default_queue = previous
        if proc.poll() is None:
            proc.terminate()  # warm shutdown: finishes the current task, then exits
            try:
                proc.wait(WORKER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(WORKER_STOP_TIMEOUT)
        log.close()


def wait_for_task(api, worker: Worker, task_id: str, *, timeout: float = 60.0, seen=None) -> dict:
    """Poll GET /tasks/{id} until it succeeded or failed; ``seen`` collects every progress."""
    deadline = time.monotonic() + timeout
    while True:
        resp = api.get(f"/api/v1/tasks/{task_id}")
        assert resp.status_code == 200, resp.content
        body = resp.json()
        if seen is not None:
            seen.append((body["state"], body["progress"]))
        if body["state"] in ("succeeded", "failed"):
            return body
        worker.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(
                f"task {task_id} still {body['state']} after {timeout} s:\n{worker.log_tail()}"
            )
        time.sleep(0.05)
