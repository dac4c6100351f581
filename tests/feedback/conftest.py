"""Fixtures of the feedback tests: a real Celery worker on the test database.

The worker is ``celery -A rms worker --pool solo`` in a subprocess, on a queue of its own (so it
only ever receives the messages of these tests, whatever else shares the broker), pointed at
the database pytest-django created. Tests that use it need
``@pytest.mark.django_db(transaction=True)`` so the worker sees committed rows.
"""

from __future__ import annotations

import contextlib
import os
import socket
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
    def __init__(self, proc: subprocess.Popen, queue: str, log_path: Path, node: str = "") -> None:
        self.proc = proc
        self.queue = queue
        self.log_path = log_path
        self.node = node  # the worker's node name (``-n``), as ``request.hostname`` reports it

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the Celery worker exited ({self.proc.returncode}):\n{self.log_tail()}")


def start_worker(queue: str, log_path: Path, *, database_url: str, **env: str) -> Worker:
    """``celery worker --pool solo`` on ``queue``, in a session (process group) of its own so a
    test can kill it as a whole; ``env`` overrides settings (e.g. RMS_TASK_HEARTBEAT_EVERY)."""
    full_env = dict(os.environ)
    full_env.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="rms.settings",
        RMS_VAR_DIR=str(settings.VAR_DIR),  # the same filesystem-broker folders
        PYTHONUNBUFFERED="1",
    )
    full_env.update(env)
    node = f"{queue}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    log = open(log_path, "a")  # noqa: SIM115 - the process holds it; closed in stop_worker
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "rms", "worker",
            "--pool", "solo", "-Q", queue, "-l", "warning",
            "-n", node,
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ],
        cwd=ROOT,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    log.close()  # the child has its own copy
    return Worker(proc, queue, log_path, node)


def stop_worker(worker: Worker) -> None:
    proc = worker.proc
    if proc.poll() is None:
        proc.terminate()  # warm shutdown: finishes the current task, then exits
        try:
            proc.wait(WORKER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(WORKER_STOP_TIMEOUT)


@contextlib.contextmanager
def tasks_sent_to(queue: str):
    """The test process sends its tasks to ``queue`` (the workers of these tests read it)."""
    from rms.celery import app

    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield
    finally:
        app.conf.task_default_queue = previous


@pytest.fixture(scope="module")
def celery_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real worker on a unique queue; the test process sends its tasks to that queue."""
    queue = f"rms-test-{uuid.uuid4().hex[:12]}"
    with django_db_blocker.unblock():
        url = worker_database_url()
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    worker = start_worker(queue, log_path, database_url=url)
    try:
        with tasks_sent_to(queue):
            yield worker
    finally:
        stop_worker(worker)
        # The worker outlives its tests' flushes and writes its heartbeat row at start and
        # after tasks: drop it, so a later test does not find a worker it never started.
        from taskruns.models import WorkerHeartbeat

        with django_db_blocker.unblock():
            WorkerHeartbeat.objects.filter(name__startswith=queue).delete()


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


def wait_until_ready(workers: list[Worker], timeout: float = 60.0) -> None:
    """Until every worker wrote its heartbeat row (it does at ``worker_ready``)."""
    from taskruns.models import WorkerHeartbeat

    deadline = time.monotonic() + timeout
    names = {w.node for w in workers}
    while set(WorkerHeartbeat.objects.filter(name__in=names).values_list("name", flat=True)) != (
        names
    ):
        for worker in workers:
            worker.check_alive()
        if time.monotonic() > deadline:
            pytest.fail("workers not ready:\n" + "\n".join(w.log_tail() for w in workers))
        time.sleep(0.1)


@contextlib.contextmanager
def two_workers(tmp_path: Path, **env: str):
    """Two real workers (``--pool solo``: one task at a time each, distinct ``-n`` names) on one
    new queue; the test process sends its tasks there."""
    queue = f"rms-test-{uuid.uuid4().hex[:12]}"
    url = worker_database_url()
    workers = [
        start_worker(queue, tmp_path / f"worker-{k}.log", database_url=url, **env) for k in (1, 2)
    ]
    try:
        with tasks_sent_to(queue):
            wait_until_ready(workers)
            yield workers
    finally:
        for worker in workers:
            stop_worker(worker)


@pytest.fixture(scope="module")
def celery_workers(django_db_setup, django_db_blocker, tmp_path_factory):
    """Two real workers on a unique queue, for the module's tests."""
    with django_db_blocker.unblock(), two_workers(tmp_path_factory.mktemp("workers")) as pair:
        yield pair
