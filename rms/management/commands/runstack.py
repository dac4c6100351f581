"""``make run``: migrate, load the demo data once, then supervise web + Celery worker + beat.

With nothing configured this runs on the embedded default (SQLite and Celery's filesystem
transport); with DATABASE_URL / REDIS_URL set, on PostgreSQL and Redis. Ctrl-C stops all three.
If any of them exits, the others are stopped too, so a half-running stack never looks healthy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from rms.models import ApiClient, MemoryObject

DEMO_USERS = (("admin", "admin"), ("operator", "operator"))
# Seconds web, worker and beat get to stop gracefully (running tasks finish) before being killed.
STOP_TIMEOUT = 30


class Command(BaseCommand):
    help = "Run the whole stack locally: web, Celery worker and beat (the `make run` target)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("RMS_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("RMS_PORT", "8000")))
        parser.add_argument("--no-demo", action="store_true", help="Do not load the demo data.")

    def handle(self, *args, host, port, no_demo, **options):
        call_command("migrate", interactive=False, verbosity=0)
        if not no_demo and not MemoryObject.objects.exists():
            self.stdout.write("Loading the demo data set (first run only)…")
            call_command("seed_demo", stdout=self.stdout)
        password = os.environ.get("RMS_DEMO_PASSWORD", "rms-demo-password")
        tokens = {}
        for name, role in DEMO_USERS:
            if not ApiClient.objects.filter(name=name).exists():
                out = StringIO()
                call_command(
                    "create_api_client", name, "--role", role, "--password", password, stdout=out
                )
                tokens[name] = out.getvalue().strip().splitlines()[-1]

        py = sys.executable
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # One metrics folder for the web workers, the Celery worker and beat: /metrics sums
        # every process (rms.telemetry); emptied here, before any of them starts.
        if not env.get("PROMETHEUS_MULTIPROC_DIR"):
            folder = Path(settings.VAR_DIR) / "prometheus"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            env["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
        commands = {
            "web": [
                py,
                "-m",
                "gunicorn",
                "rms.wsgi:application",
                "-b",
                f"{host}:{port}",
                "-w",
                "2",
                "-k",
                "gthread",
                "--threads",
                "4",
                "--access-logfile",
                "-",
                "-c",
                "python:rms.gunicorn_conf",
                "--no-control-socket",
            ],
            "worker": [
                py,
                "-m",
                "celery",
                "-A",
                "rms",
                "worker",
                "-l",
                "info",
                "--concurrency",
                "2",
                "-n",
                "rms-worker@%h",
            ],
            "beat": [
                py,
                "-m",
                "celery",
                "-A",
                "rms",
                "beat",
                "-l",
                "info",
                "--schedule",
                settings.CELERY_BEAT_SCHEDULE_FILENAME,
            ],
        }
        # Each process leads a process group of its own (with its gunicorn workers or prefork
        # children), so that a Ctrl-C reaches this command alone, each process is stopped once
        # (not by the terminal's SIGINT and then by ours), and one that does not stop in time is
        # killed with everything it started.
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        procs = {
            name: subprocess.Popen(cmd, env=env, process_group=0) for name, cmd in commands.items()
        }
        database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        broker = "filesystem (embedded)" if settings.CELERY_BROKER_IS_EMBEDDED else "redis"
        ready = _wait_for_worker(procs, lambda: stopping)
        if not stopping and all(proc.poll() is None for proc in procs.values()):
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nRMS feedback is running: http://{host}:{port}/\n"
                    f"  login: admin / {password} (admin), operator / {password} (operator)\n"
                    f"  API:   http://{host}:{port}/api/v1/docs\n"
                    f"  database: {database}   broker: {broker}\n"
                    + "".join(f"  API token for {n}: {t}\n" for n, t in tokens.items())
                    + ("" if ready else "  (the worker has not answered a ping yet)\n")
                    + "Press Ctrl-C to stop web, worker and beat.\n"
                )
            )
        code = 0
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with code {proc.returncode}; stopping.")
                    code = proc.returncode or 1
                    stopping = True
                    break
            time.sleep(0.5)
        self.stdout.write("Stopping web, worker and beat…")
        _stop_all(procs, timeout=STOP_TIMEOUT)
        sys.exit(code)


def _wait_for_worker(
    procs: dict[str, subprocess.Popen], stopping: Callable[[], bool], timeout: float = 30.0
) -> bool:
    """Until the worker answers a ping (so the banner above comes after the worker's own start-up
    lines, not buried by them), or `timeout` seconds, or one of the processes exits."""
    from rms.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping():
        if any(proc.poll() is not None for proc in procs.values()):
            return False
        try:
            if app.control.ping(timeout=0.5):
                return True
        except Exception:  # the broker is not reachable yet
            time.sleep(0.5)
    return False


def _stop_all(procs: dict[str, subprocess.Popen], timeout: float) -> None:
    """SIGTERM to each process (gunicorn and Celery stop gracefully: running requests and tasks
    finish); whatever has not exited after `timeout` seconds is killed with its process group,
    so no gunicorn worker or prefork child is left behind."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
