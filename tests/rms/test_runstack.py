"""``make run``'s stack (``manage.py runstack``) on the embedded defaults a new user gets: SQLite
and Celery's filesystem broker, web + a real worker + beat; a task sent through the API is run
by the worker; Ctrl-C stops all three."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rms.management.commands.runstack import _stop_all
from tests.servers import ROOT, free_port

# Servers of the suite's own configuration are not this test's: it runs the quick start's.
UNSET = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR")


def wait_for(predicate, what: str, log, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"{what} within {timeout:.0f} s; the stack printed:\n{log()}")


def session_processes(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``: from /proc where there is one (a
    slim image may have no ``ps``), else from ``ps``."""
    proc = Path("/proc")
    if not proc.is_dir():
        out = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True)
        rows = (line.split() for line in out.stdout.splitlines())
        return [int(p) for p, s, stat in rows if int(s) == sid and not stat.startswith("Z")]
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # state, ppid, pgrp, session
            found.append(int(entry.name))
    return found


def test_runstack_serves_runs_a_task_on_the_worker_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(RMS_VAR_DIR=str(tmp_path / "var"), RMS_DEMO_PASSWORD="a-test-password")
    log_path = tmp_path / "stack.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runstack", "--no-demo", "--port", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches it
        )  # fmt: skip

    def log() -> str:
        return log_path.read_text(errors="replace")

    try:
        wait_for(lambda: "Press Ctrl-C" in log() or proc.poll() is not None, "the banner", log)
        text = log()
        assert proc.poll() is None, text
        # The banner comes after the worker's start-up lines, not buried under them.
        assert text.index("rms-worker@") < text.index("ready.") < text.index("RMS feedback is")
        assert f"running: http://127.0.0.1:{port}/" in text
        assert "login: admin / a-test-password (admin)" in text
        assert "database: sqlite3   broker: filesystem (embedded)" in text
        assert "No hostname was supplied" not in text
        token = re.search(r"API token for admin: (\S+)", text).group(1)

        base = f"http://127.0.0.1:{port}/api/v1"
        headers = {"Authorization": f"Token {token}"}
        health = httpx.get(f"{base}/health", timeout=10)
        assert health.status_code == 200, health.text
        assert health.json()["unavailable"] == []

        sent = httpx.post(
            f"{base}/tasks", json={"kind": "verify_chain", "params": {}}, headers=headers
        )
        assert sent.status_code == 202, sent.text
        task_url = f"{base}/tasks/{sent.json()['id']}"

        def finished():
            body = httpx.get(task_url, headers=headers, timeout=10).json()
            return body if body["state"] in ("succeeded", "failed") else None

        body = wait_for(finished, "the worker ran the task", log)
        assert body["state"] == "succeeded", body
        assert body["progress"] == 1.0
        # Beat sends the webhook dispatcher every second; its idle passes are not logged, the
        # task that did run is.
        wait_for(lambda: "feedback.tasks.run_task" in log(), "the worker logged the task", log)
        text = log()
        assert text.count("Sending due task webhook-dispatch") == 0
        assert "Task delivery.tasks.dispatch_webhooks[" not in text

        # A terminal's Ctrl-C: SIGINT to the foreground process group, which is runstack's
        # alone (web, worker and beat lead groups of their own); it stops each of them once.
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0, log()
        assert not session_processes(proc.pid), log()
        text = log()
        assert "Hitting Ctrl+C again" not in text
        assert text.count("worker: Warm shutdown") == 1
        assert "Shutting down: Master" in text
    finally:
        if proc.poll() is None or session_processes(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_a_process_that_does_not_stop_in_time_is_killed_with_its_children(tmp_path):
    # A parent that ignores SIGTERM, with a child of its own (like a worker's prefork child).
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(tmp_path / 'child')!r}, 'w').write(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    stubborn = subprocess.Popen([sys.executable, "-c", script], process_group=0)
    polite = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], process_group=0
    )
    child_file = tmp_path / "child"
    # open() creates the file before write() fills it: wait for the pid, not the file
    wait_for(
        lambda: child_file.exists() and child_file.read_text().strip(),
        "the child started", lambda: "", 30,
    )  # fmt: skip
    child = int(child_file.read_text())

    started = time.monotonic()
    _stop_all({"stubborn": stubborn, "polite": polite}, timeout=1.0)

    assert time.monotonic() - started < 10
    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL
    # The orphaned child was killed with its group (it is reaped by init, or is a zombie).
    wait_for(lambda: not alive(child), "the child was killed", lambda: "", 10)


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, killed and not yet reaped, does not count where /proc tells)."""
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
