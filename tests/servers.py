"""Real servers that tests start on free loopback ports and always stop: gunicorn (what production
runs; Django's test client cannot send a chunked body) and a throwaway redis-server (to stop
mid-test)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def subprocess_database_url() -> str:
    """The URL of the database pytest-django set up, for another process."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = str(db["NAME"])
        if name == ":memory:" or name.startswith("file:"):
            pytest.fail("another process needs a file-backed SQLite test database")
        return f"sqlite:///{Path(name).resolve()}"
    user = quote(db.get("USER") or "", safe="")
    password = quote(db.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{quote(db['NAME'], safe='')}"


def subprocess_env(settings, **extra: str) -> dict[str, str]:
    """The environment of a child Django process on the test database: this one's, plus the
    database URL, the settings module and the var folder, plus ``extra``."""
    return {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "rms.settings",
        "RMS_VAR_DIR": str(settings.VAR_DIR),
        **extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


@dataclass
class Gunicorn:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def gunicorn(tmp_path: Path, *, args: tuple[str, ...] = (), **env: str) -> Iterator[Gunicorn]:
    """``gunicorn rms.wsgi`` with the gthread worker of ``make run``, on the test database."""
    log_path = tmp_path / "gunicorn.log"
    full_env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", "rms.wsgi:application",
                "-b", "127.0.0.1:0", "-w", "1", "-k", "gthread", "--threads", "2",
                "--no-control-socket", "--timeout", "60", *args,
            ],
            cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            match = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", log_path.read_text())
            if match:
                port = int(match.group(1))
            elif proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not start:\n{log_path.read_text()}")
            else:
                time.sleep(0.05)
        # the worker boots after the master listens: wait until it answers
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"GET /api/v1/nope HTTP/1.0\r\n\r\n")
                    if s.recv(12).startswith(b"HTTP/1"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not answer:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield Gunicorn(proc, port, log_path)
    finally:
        stop(proc)


class RedisServer:
    """A redis-server of the test's own on a free port, without persistence; ``stop`` and
    ``start`` again on the same port to simulate an outage."""

    def __init__(self, tmp_path: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (needed by @pytest.mark.redis tests)")
        self.binary = binary
        self.dir = tmp_path
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(7) == b"+PONG\r\n":
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)  # an outage, not a clean shutdown
            self.proc.wait(10)
            self.proc = None
