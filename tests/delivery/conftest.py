"""Fixtures of the webhook tests: real local HTTP receivers (threads on free loopback ports)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from delivery import dispatch


@dataclass
class Received:
    headers: dict
    body: bytes
    at: float


@dataclass
class Receiver:
    """Records every POST; ``statuses`` answers the first requests (then 200), ``delay``
    sleeps before answering. ``stop()`` closes the port (connections refused) and ``start()``
    opens it again on the same port."""

    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    received: list[Received] = field(default_factory=list)
    port: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                receiver.received.append(Received(dict(self.headers), body, time.monotonic()))
                if receiver.delay:
                    time.sleep(receiver.delay)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def ids(self) -> list[str]:
        return [r.headers["webhook-id"] for r in self.received]


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(**kw) -> Receiver:
        r = Receiver(**kw)
        r.start()
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


@pytest.fixture
def fast_retries(settings):
    """Loopback receivers allowed, and retries in tenths of a second instead of minutes."""
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    settings.RMS_WEBHOOK_RETRY_SCHEDULE = (0.05, 0.1, 0.1, 0.2)
    return settings


def drive(until: Callable[[], bool], *, timeout: float = 20.0, wait: float = 1.0) -> None:
    """Run dispatcher passes until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError("the dispatcher did not get there in time")
        dispatch.run_pass(budget=wait)
        time.sleep(0.03)
    connection.close()
