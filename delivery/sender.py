"""Webhook POSTs over kept-alive connections to the address ``delivery.safety`` checked.

Built on the standard library's ``http.client``: a delivery costs ~65 µs of the dispatcher's CPU
where httpx took ~300 µs (docs/DECISIONS.md), and the dispatcher is CPU-bound.

What a call guarantees (tests/delivery/test_sender.py pins each one):

- it connects to ``Target.address`` and nothing else: the name is never resolved again, so a
  name that now resolves inside (DNS rebinding) is not followed;
- the Host header is the URL's host (with its port, as written); over https the host name is
  the TLS SNI and the certificate must be valid for it (``CERT_REQUIRED`` and
  ``check_hostname``, trusting certifi's roots, as httpx did);
- redirects are never followed (``http.client`` has no such feature: a 3xx is a failure) and no
  proxy is taken from the environment (``http.client`` reads none);
- ``policy.TIMEOUT`` bounds the connect and every read and write (httpx's timeout did the same);
- at most ``MAX_BODY`` bytes of the answer are read: a longer body drops the connection rather
  than being read to its end.

Each pool thread keeps one connection per (scheme, address, port, host), at most
``MAX_CONNECTIONS`` (the least recently used is closed first). A kept connection that the server
closed while it was idle is noticed before reuse (its socket is readable) and replaced; a request
that fails on a reused connection before any answer is sent once more on a new one (a receiver
dedupes on ``webhook-id``: delivery is at least once).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache

import certifi

from delivery import policy
from delivery.safety import Target

MAX_BODY = 64 * 1024  # bytes of a response read at most (only the status matters)
MAX_CONNECTIONS = 8  # kept-alive connections per pool thread

_local = threading.local()


class ConnectError(OSError):
    """The connection (TCP, or the TLS handshake and certificate check) failed: nothing was
    sent."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes  # at most MAX_BODY bytes


@cache
def default_context() -> ssl.SSLContext:
    """Verifies the certificate chain and the host name (shared by every thread: an
    ``SSLContext`` is safe to use from several)."""
    return ssl.create_default_context(cafile=certifi.where())


class _Connection(http.client.HTTPConnection):
    """An HTTP/1.1 connection to a checked address; TLS on it names ``tls_host``."""

    def __init__(self, address: str, port: int, *, tls_host: str | None, context, timeout):
        super().__init__(address, port, timeout=timeout)
        self.tls_host = tls_host
        self.context = context

    def connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls_host is not None:
                try:
                    sock = self.context.wrap_socket(sock, server_hostname=self.tls_host)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectError(str(exc)) from exc
        self.sock = sock


def _connections() -> OrderedDict:
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = OrderedDict()
    return conns


def _dropped(sock) -> bool:
    """An idle kept-alive socket that is readable has been closed by the server (or holds
    bytes nobody asked for): either way it is not reused."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _connection(target: Target, context, timeout: float) -> tuple[_Connection, bool]:
    """This thread's connection for ``target`` and whether it was used before."""
    conns = _connections()
    key = (target.scheme, target.address, target.port, target.host)
    conn = conns.get(key)
    if conn is not None and conn.sock is not None and not _dropped(conn.sock):
        conns.move_to_end(key)
        conn.timeout = timeout
        conn.sock.settimeout(timeout)
        return conn, True
    if conn is not None:
        conn.close()
    conn = _Connection(
        target.address,
        target.port,
        tls_host=target.host if target.scheme == "https" else None,
        context=context or default_context(),
        timeout=timeout,
    )
    conns[key] = conn
    conns.move_to_end(key)
    while len(conns) > MAX_CONNECTIONS:
        _, old = conns.popitem(last=False)
        old.close()
    return conn, False


def post(
    target: Target,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float | None = None,
    context: ssl.SSLContext | None = None,
) -> Response:
    """POST ``body`` to ``target``. Raises ``TimeoutError``, ``ConnectError`` (nothing sent),
    or another ``OSError`` / ``http.client.HTTPException`` (the connection broke)."""
    timeout = policy.TIMEOUT if timeout is None else timeout
    headers = {**headers, "host": target.host_header, "content-length": str(len(body))}
    conn, reused = _connection(target, context, timeout)
    try:
        return _exchange(conn, target.path, body, headers)
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        if not reused:
            raise
    # The server closed the kept connection as we wrote to it: once more on a new one.
    conn.close()
    return _exchange(conn, target.path, body, headers)


def _exchange(conn: _Connection, path: str, body: bytes, headers: dict) -> Response:
    try:
        if conn.sock is None:
            conn.connect()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_BODY + 1)
    except BaseException:
        conn.close()
        raise
    if not response.isclosed():  # a longer body than we read: not drained, dropped
        conn.close()
    return Response(response.status, data[:MAX_BODY])


def close_all() -> None:
    """Close this thread's kept connections (a pool thread shutting down)."""
    conns = _connections()
    while conns:
        _, conn = conns.popitem()
        conn.close()
