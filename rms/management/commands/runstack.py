"""``make run``: migrate, load the demo data once, then supervise web + Celery worker + beat.

With nothing configured this runs on the embedded default (SQLite and Celery's filesystem
transport); with DATABASE_URL / REDIS_URL set, on PostgreSQL and Redis. Ctrl-C stops all three.
If any of them exits, the others are stopped too, so a half-running stack never looks healthy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from rms.models import ApiClient, MemoryObject

DEMO_USERS = (("admin", "admin"), ("operator", "operator"))


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
        procs = {name: subprocess.Popen(cmd, env=env) for name, cmd in commands.items()}
        database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        broker = "filesystem (embedded)" if settings.CELERY_BROKER_IS_EMBEDDED else "redis"
        time.sleep(1.5)
        self.stdout.write(
            self.style.SUCCESS(
                f"\nRMS feedback is running: http://{host}:{port}/\n"
                f"  login: admin / {password} (admin), operator / {password} (operator)\n"
                f"  API:   http://{host}:{port}/api/v1/docs\n"
                f"  database: {database}   broker: {broker}\n"
                + "".join(f"  API token for {n}: {t}\n" for n, t in tokens.items())
                + "Press Ctrl-C to stop web, worker and beat.\n"
            )
        )

        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        code = 0
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with code {proc.returncode}; stopping.")
                    code = proc.returncode or 1
                    stopping = True
                    break
            time.sleep(0.5)
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        sys.exit(code)
