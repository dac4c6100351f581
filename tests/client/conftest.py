"""The client against a live server of this project (pytest-django's ``live_server``), with a
fault-injecting HTTP proxy between them. No mocked transport: every call is real HTTP."""

from __future__ import annotations

import asyncio
import http.client
import inspect
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from rms_client import AsyncRMSClient, RMSClient

from tests.factories import make_client, make_namespace

#: Small backoffs keep the suite fast; the retry logic is the same as with the defaults.
FAST = {"timeout": 5.0, "max_retries": 6, "backoff_base": 0.01, "backoff_max": 0.05,
        "retry_deadline": 30.0}  # fmt: skip


@dataclass
class Env:
    url: str
    client: str  # a client of namespace "support"
    operator: str
    admin: str
    outsider: str  # a client of "billing" only


@pytest.fixture
def env(live_server, transactional_db) -> Env:
    make_namespace("support")
    make_namespace("billing")
    return Env(
        url=live_server.url,
        client=make_client("client-1", "client", ["support"])[1],
        operator=make_client("operator-1", "operator")[1],
        admin=make_client("admin-1", "admin")[1],
        outsider=make_client("outsider-1", "client", ["billing"])[1],
    )


# --- one scenario, both clients ------------------------------------------------------------------


@pytest.fixture(params=["sync", "async"])
def flavour(request) -> str:
    return request.param


async def aw(value):
    """The value of a sync call, or the awaited value of an async one."""
    return await value if inspect.isawaitable(value) else value


async def alist(iterable) -> list:
    if hasattr(iterable, "__aiter__"):
        return [item async for item in iterable]
    return list(iterable)


def run(flavour: str, url: str, token: str | None, scenario: Callable, **options):
    """Run ``scenario(client)`` (a coroutine function) with a sync or an async client."""
    opts = {**FAST, **options}

    async def main():
        if flavour == "sync":
            with RMSClient(url, token, **opts) as client:
                return await scenario(client)
        async with AsyncRMSClient(url, token, **opts) as client:
            return await scenario(client)

    return asyncio.run(main())


# --- the fault-injecting proxy -------------------------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-connection", "content-length"}  # fmt: skip


@dataclass
class Seen:
    at: float
    method: str
    path: str
    action: str
    upstream: int | None  # the server's status when the request was forwarded


class FaultProxy:
    """An HTTP/1.1 proxy on a free port of 127.0.0.1 forwarding to the live server. ``plan(n,
    method, path)`` names what to do with the n-th request (from 0):

    - ``"pass"``: forward and answer;
    - ``("status", code, retry_after)``: answer ``code`` without forwarding;
    - ``"drop_after"``: forward, let the server store it, then close without answering;
    - ``("stall_after", seconds)``: forward, then hold the answer back and close (a timeout);
    - ``"drop_before"``: close without forwarding.
    """

    def __init__(self, upstream: str, plan: Callable[[int, str, str], object] | None = None):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.plan = plan or (lambda n, method, path: "pass")
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def handle_one(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    n = len(proxy.seen)
                    action = proxy.plan(n, self.command, self.path)
                    seen = Seen(time.monotonic(), self.command, self.path, str(action), None)
                    proxy.seen.append(seen)
                if isinstance(action, tuple) and action[0] == "status":
                    _, code, retry_after = action
                    payload = json.dumps(
                        {"error": {"code": "injected", "message": f"Injected {code}."}}
                    ).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    if retry_after is not None:
                        self.send_header("Retry-After", str(retry_after))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if action == "drop_before":
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                seen.upstream = resp.status
                if action == "drop_after":
                    self.close_connection = True
                    return
                if isinstance(action, tuple) and action[0] == "stall_after":
                    time.sleep(action[1])
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = handle_one

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def count(self, action: str | None = None, path: str | None = None) -> int:
        return sum(
            1
            for s in self.seen
            if (action is None or s.action == action) and (path is None or s.path == path)
        )
