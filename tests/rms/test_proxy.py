"""The deployment's reverse proxy (deploy/nginx.conf, docker-compose.yml's ``proxy`` service): nginx
accepts the file, compose puts it in front of gunicorn, and clients trickling request bodies
leave /health answering, through the real nginx in front of a real gunicorn."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.servers import ROOT, free_port, gunicorn, stop

CONF = ROOT / "deploy" / "nginx.conf"
COMPOSE = ROOT / "docker-compose.yml"


def nginx_binary() -> str:
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx)")
    return binary


def local_conf(tmp_path: Path, listen: int, upstream: int) -> Path:
    """The committed file with compose's two addresses (``web:8000``, port 8080) made local."""
    text = CONF.read_text()
    text, n_up = re.subn(r"server web:8000;", f"server 127.0.0.1:{upstream};", text)
    text, n_listen = re.subn(r"listen 8080;", f"listen 127.0.0.1:{listen};", text)
    assert (n_up, n_listen) == (1, 1), "deploy/nginx.conf no longer has compose's addresses"
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    path = prefix / "nginx.conf"
    path.write_text(text)
    return path


def test_compose_serves_through_the_proxy_with_the_tested_config():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    proxy = services["proxy"]
    assert proxy["image"].startswith("nginx:")
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in proxy["volumes"]
    assert proxy["ports"] == ["8000:8080"]
    assert proxy["depends_on"]["web"]["condition"] == "service_healthy"
    # gunicorn is reachable only through the proxy
    assert "ports" not in services["web"]
    assert "8000" in [str(p) for p in services["web"]["expose"]]
    command = services["web"]["command"]
    assert command[command.index("-b") + 1] == "0.0.0.0:8000"


def test_nginx_accepts_the_config(tmp_path):
    conf = local_conf(tmp_path, free_port(), free_port())
    result = subprocess.run(
        [nginx_binary(), "-t", "-p", str(conf.parent), "-c", str(conf), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def trickle(port: int) -> socket.socket:
    """A client that sends a POST's headers and the first bytes of a large body, then stalls."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(
        b"POST /api/v1/feedback-sessions HTTP/1.1\r\nHost: localhost\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"session_id": '
    )
    return s


@pytest.mark.django_db(transaction=True)
def test_slow_bodies_through_nginx_leave_health_answering(tmp_path):
    binary = nginx_binary()
    # gunicorn's smallest pool: two trickling bodies straight at it would hold both threads.
    with gunicorn(tmp_path, args=("-w", "1", "--threads", "2")) as server:
        listen = free_port()
        conf = local_conf(tmp_path, listen, server.port)
        log = open(tmp_path / "nginx.log", "w")  # noqa: SIM115 - closed in finally
        proc = subprocess.Popen(
            [binary, "-p", str(conf.parent), "-c", str(conf), "-e", "stderr",
             "-g", "daemon off;"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        sockets: list[socket.socket] = []
        try:
            while True:  # until nginx listens
                try:
                    socket.create_connection(("127.0.0.1", listen), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None:
                        pytest.fail((tmp_path / "nginx.log").read_text())
                    time.sleep(0.05)
            sockets = [trickle(listen) for _ in range(16)]
            for s in sockets:
                s.sendall(b'"slow')  # still sending, never finishing
            for _ in range(4):
                conn = http.client.HTTPConnection("127.0.0.1", listen, timeout=60)
                conn.request("GET", "/api/v1/health")
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                assert resp.status == 200, body
                assert json.loads(body)["status"] == "ok"
            # and nginx's own refusal of a too large body is the API's JSON error
            conn = http.client.HTTPConnection("127.0.0.1", listen, timeout=60)
            conn.request(
                "POST", "/api/v1/feedback-sessions", body=b"x" * (10 * 1024 * 1024),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            assert resp.status == 413
            assert json.loads(body)["error"]["code"] == "request_too_large"
        finally:
            for s in sockets:
                s.close()
            stop(proc)
            log.close()
