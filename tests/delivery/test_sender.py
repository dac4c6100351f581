"""The webhook sender (delivery.sender) against real local servers, plain and TLS (trustme): it
connects to the pinned address only, sends the URL's Host and TLS SNI and checks the certificate
against the host name, follows no redirect, reads no proxy from the environment, caps the body
it reads, honours its timeout and keeps connections alive (replacing one the server closed)."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme
from django.utils import timezone

from delivery import dispatch, policy, sender
from delivery.safety import Target, resolve

NAME = "hooks.example.test"  # resolves nowhere: only the pinned address can be reached


@dataclass
class Server:
    """A local HTTP/1.1 server whose answer is ``reply(handler)``; notes each request's Host,
    the client's port (one per connection) and the TLS SNI it was offered."""

    reply: object = None
    tls: ssl.SSLContext | None = None
    requests: list = field(default_factory=list)
    sni: list = field(default_factory=list)
    httpd: ThreadingHTTPServer | None = None

    def start(self) -> Server:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                server.requests.append((self.headers.get("host"), self.client_address[1], body))
                if server.reply is not None:
                    server.reply(self)
                    return
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if self.tls is not None:
            self.tls.sni_callback = lambda sock, name, ctx: self.sni.append(name)
            self.httpd.socket = self.tls.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def target(self, host: str = NAME, scheme: str = "http", path: str = "/hook?x=1") -> Target:
        return Target(
            url=f"{scheme}://127.0.0.1:{self.port}{path}",
            host=host,
            address="127.0.0.1",
            scheme=scheme,
            port=self.port,
            path=path,
            host_header=f"{host}:{self.port}",
        )

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    made: list[Server] = []

    def make(**kw) -> Server:
        made.append(Server(**kw).start())
        return made[-1]

    yield make
    for s in made:
        s.stop()
    sender.close_all()


@pytest.fixture
def ca():
    return trustme.CA()


def tls_server(server, ca, name: str = NAME) -> Server:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(context)
    return server(tls=context)


def trusting(ca) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def test_plain_http_goes_to_the_pinned_address_with_the_urls_host(server):
    s = server()
    response = sender.post(s.target(), b'{"a":1}', {"webhook-id": "msg_1"})
    assert (response.status, response.body) == (200, b"ok")
    assert s.requests == [(f"{NAME}:{s.port}", s.requests[0][1], b'{"a":1}')]


def test_https_sends_the_host_as_sni_and_verifies_the_certificate_for_it(server, ca):
    s = tls_server(server, ca)
    response = sender.post(s.target(scheme="https"), b"{}", {}, context=trusting(ca))
    assert response.status == 200
    assert s.sni == [NAME]
    assert s.requests[0][0] == f"{NAME}:{s.port}"


def test_https_refuses_a_certificate_for_another_name(server, ca):
    s = tls_server(server, ca, name="other.example.test")
    with pytest.raises(sender.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        sender.post(s.target(scheme="https"), b"{}", {}, context=trusting(ca))
    assert s.requests == []


def test_https_refuses_a_certificate_from_an_untrusted_authority(server, ca):
    s = tls_server(server, ca)
    with pytest.raises(sender.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        sender.post(s.target(scheme="https"), b"{}", {})  # certifi's roots: not trustme's CA
    assert s.requests == []


def test_the_default_context_checks_names_and_certificates():
    context = sender.default_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True


def test_a_redirect_is_not_followed(server):
    elsewhere = server()

    def redirect(handler):
        handler.send_response(307)
        handler.send_header("location", f"http://127.0.0.1:{elsewhere.port}/inside")
        handler.send_header("content-length", "0")
        handler.end_headers()

    s = server(reply=redirect)
    assert sender.post(s.target(), b"{}", {}).status == 307
    assert elsewhere.requests == []


def test_no_proxy_is_taken_from_the_environment(server, monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: nothing answers
    s = server()
    assert sender.post(s.target(), b"{}", {}).status == 200
    assert len(s.requests) == 1


@pytest.mark.parametrize("chunked", [False, True])
def test_a_huge_answer_is_cut_and_its_connection_dropped(server, chunked):
    size = 4 * 1024 * 1024

    def huge(handler):
        handler.send_response(200)
        if chunked:
            handler.send_header("transfer-encoding", "chunked")
            handler.end_headers()
            chunk = b"x" * 65536
            with contextlib.suppress(OSError):  # the sender hangs up, as it should
                for _ in range(size // len(chunk)):
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.write(b"0\r\n\r\n")
        else:
            handler.send_header("content-length", str(size))
            handler.end_headers()
            with contextlib.suppress(OSError):
                handler.wfile.write(b"x" * size)

    s = server(reply=huge)
    response = sender.post(s.target(), b"{}", {})
    assert (response.status, len(response.body)) == (200, sender.MAX_BODY)
    sender.post(s.target(), b"{}", {})
    first, second = (port for _, port, _ in s.requests)
    assert first != second  # the unread rest was not drained: a new connection


def test_the_timeout_is_honoured(server):
    s = server(reply=lambda handler: time.sleep(2))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        sender.post(s.target(), b"{}", {}, timeout=0.3)
    assert time.monotonic() - started < 1.5


def test_the_dispatcher_reports_a_timeout_after_policy_timeout(server, settings, monkeypatch):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    monkeypatch.setattr(policy, "TIMEOUT", 0.3)
    s = server(reply=lambda handler: time.sleep(2))
    claim = dispatch.Claimed(
        delivery_id=1,
        endpoint_id=1,
        url=f"http://127.0.0.1:{s.port}/hook",
        secret="whsec_" + "QUJD" * 8,
        event={"id": "evt_1", "type": "webhook.test"},
        lease_until=timezone.now() + timedelta(seconds=30),
    )
    started = time.monotonic()
    outcome = dispatch.send(claim)
    assert outcome.status is None
    assert outcome.error == "timeout after 0.3 s"
    assert 250 <= outcome.latency_ms < 1500
    assert time.monotonic() - started < 1.5


def test_connections_are_kept_alive_and_replaced_once_the_server_closes_them(server):
    closing = {"next": False}

    def answer(handler):
        handler.send_response(200)
        handler.send_header("content-length", "0")
        if closing["next"]:
            handler.send_header("connection", "close")
            handler.close_connection = True
        handler.end_headers()

    s = server(reply=answer)
    target = s.target()
    for _ in range(3):
        assert sender.post(target, b"{}", {}).status == 200
    assert len({port for _, port, _ in s.requests}) == 1  # one connection for all three
    closing["next"] = True
    sender.post(target, b"{}", {})
    closing["next"] = False
    sender.post(target, b"{}", {})
    ports = [port for _, port, _ in s.requests]
    assert ports[3] == ports[0] and ports[4] != ports[0]


def test_a_kept_connection_the_server_dropped_while_idle_is_replaced(server):
    def answer_then_hang_up(handler):  # keep-alive promised, then closed (an idle timeout)
        handler.send_response(200)
        handler.send_header("content-length", "0")
        handler.end_headers()
        handler.close_connection = True

    s = server(reply=answer_then_hang_up)
    target = s.target()
    assert sender.post(target, b"{}", {}).status == 200
    time.sleep(0.1)  # the server's FIN arrives
    assert sender.post(target, b"{}", {}).status == 200
    first, second = (port for _, port, _ in s.requests)
    assert first != second


def test_a_request_that_meets_a_closed_kept_connection_is_sent_once_more(server, monkeypatch):
    def answer_then_hang_up(handler):
        handler.send_response(200)
        handler.send_header("content-length", "0")
        handler.end_headers()
        handler.close_connection = True

    s = server(reply=answer_then_hang_up)
    target = s.target()
    sender.post(target, b"{}", {})
    time.sleep(0.1)
    monkeypatch.setattr(sender, "_dropped", lambda sock: False)  # the check before reuse misses
    assert sender.post(target, b"{}", {}).status == 200  # sent again on a new connection
    assert len(s.requests) == 2


def test_resolve_pins_the_checked_address_and_keeps_the_name(settings):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    target = resolve("https://localhost:8443/in/hook?b=2#frag")
    assert (target.scheme, target.host, target.port) == ("https", "localhost", 8443)
    assert target.address in ("127.0.0.1", "::1")
    assert (target.path, target.host_header) == ("/in/hook?b=2", "localhost:8443")
    plain = resolve("http://127.0.0.1/")
    assert (plain.port, plain.path, plain.host_header) == (80, "/", "127.0.0.1")
