"""Change-feed long polls are bounded (rms.longpoll): per process, per client and in total, a
poll past a bound is 429 with Retry-After in the contract's shape, every slot is given back, and
other requests keep answering while the polls are held. Through a real gunicorn."""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest
import time_machine
from django.core.cache import cache
from django.test import override_settings

from rms import longpoll
from tests.factories import make_object
from tests.servers import gunicorn

#: Seconds to wait for a response that must come (the test fails instead of hanging).
PATIENCE = 90


def call(port: int, path: str, token: str | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        conn.request("GET", path, headers={"Authorization": token} if token else {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def token_of(api) -> str:
    return api._credentials["HTTP_AUTHORIZATION"]


def head(port: int, token: str, namespace: str) -> str:
    status, _, body = call(port, f"/api/v1/changes?namespace={namespace}", token)
    assert status == 200, body
    return json.loads(body)["next_cursor"]


def fire(port: int, path: str, token: str, n: int, answers: queue.Queue) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=lambda: answers.put(call(port, path, token)), daemon=True)
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    return threads


def collect(answers: queue.Queue, n: int) -> list[tuple[int, dict, bytes]]:
    return [answers.get(timeout=PATIENCE) for _ in range(n)]


def assert_refused(answer) -> None:
    status, headers, body = answer
    assert status == 429, body
    assert int(headers["Retry-After"]) > 0
    error = json.loads(body)["error"]
    assert error["code"] == "throttled"
    assert "wait" in error["message"]


@pytest.mark.django_db(transaction=True)
def test_polls_past_the_client_and_total_bounds_are_429_and_health_answers(
    tmp_path, client_api, outsider_api
):
    """64 open polls from two clients over two gunicorn processes: two clients' polls held up to
    the per-client bound, all of them up to the total; every other one is refused at once, and
    /health answers while the held polls wait. An event releases them and their slots."""
    env = {
        "RMS_VAR_DIR": str(tmp_path / "var"),
        "RMS_LONGPOLL_PER_PROCESS": "4",
        "RMS_LONGPOLL_PER_CLIENT": "2",
        "RMS_LONGPOLL_TOTAL": "3",
    }
    a, b = token_of(client_api), token_of(outsider_api)
    with gunicorn(tmp_path, args=("-w", "2", "--threads", "8"), **env) as server:
        path_a = (
            f"/api/v1/changes?namespace=support&wait=30&after={head(server.port, a, 'support')}"
        )
        path_b = (
            f"/api/v1/changes?namespace=billing&wait=30&after={head(server.port, b, 'billing')}"
        )
        answers_a: queue.Queue = queue.Queue()
        fire(server.port, path_a, a, 32, answers_a)
        for answer in collect(answers_a, 30):  # the client bound: 2 of its 32 wait
            assert_refused(answer)
        answers_b: queue.Queue = queue.Queue()
        fire(server.port, path_b, b, 32, answers_b)
        for answer in collect(answers_b, 31):  # the total bound: 1 more waits
            assert_refused(answer)
        assert answers_a.empty() and answers_b.empty()  # the three are still held

        for _ in range(8):  # new connections: both processes answer
            status, _, body = call(server.port, "/api/v1/health")
            assert status == 200, body
            assert json.loads(body)["status"] == "ok"

        make_object(client_api.row, namespace="support")
        make_object(outsider_api.row, namespace="billing")
        for status, _, body in collect(answers_a, 2) + collect(answers_b, 1):
            assert status == 200, body
            assert len(json.loads(body)["results"]) == 1

        # Every slot was given back: the client may wait again.
        again = (
            f"/api/v1/changes?namespace=support&wait=0.5&after={head(server.port, a, 'support')}"
        )
        answers: queue.Queue = queue.Queue()
        fire(server.port, again, a, 2, answers)
        assert [status for status, _, _ in collect(answers, 2)] == [200, 200]


@pytest.mark.django_db(transaction=True)
def test_a_process_keeps_a_thread_for_other_requests_and_a_gone_client_frees_its_slot(
    tmp_path, client_api
):
    """One process with two threads and one long-poll slot: the second poll is refused while the
    first waits, /health answers on the free thread; a poll whose client hung up gives its slot
    back when its wait ends."""
    env = {
        "RMS_VAR_DIR": str(tmp_path / "var"),
        "RMS_LONGPOLL_PER_PROCESS": "1",
        "RMS_LONGPOLL_PER_CLIENT": "10",
        "RMS_LONGPOLL_TOTAL": "10",
    }
    token = token_of(client_api)
    with gunicorn(tmp_path, args=("-w", "1", "--threads", "2"), **env) as server:
        after = head(server.port, token, "support")
        answers: queue.Queue = queue.Queue()
        fire(
            server.port,
            f"/api/v1/changes?namespace=support&wait=30&after={after}",
            token,
            2,
            answers,
        )
        assert_refused(collect(answers, 1)[0])  # whichever came second
        assert answers.empty()  # the first still waits
        status, _, body = call(server.port, "/api/v1/health")
        assert status == 200, body
        make_object(client_api.row, namespace="support")
        assert collect(answers, 1)[0][0] == 200

        # A client that hangs up: its poll runs out its wait, then the slot is free again.
        after = head(server.port, token, "support")
        with socket_to(server.port) as s:
            s.sendall(
                f"GET /api/v1/changes?wait=2&after={after} HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: {token}\r\n\r\n".encode()
            )
        statuses = []
        while not statuses or statuses[-1] != 200:
            statuses.append(call(server.port, f"/api/v1/changes?wait=0.2&after={after}", token)[0])
            time.sleep(0.05)  # pacing only: the loop ends on the answer, not on time
            assert len(statuses) < 10_000
        assert set(statuses) <= {200, 429}


def socket_to(port: int):
    import socket

    return socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)


@pytest.mark.django_db
def test_a_slot_is_given_back_after_an_exception_and_expires_if_its_process_dies(tmp_path):
    """On the file cache the embedded deployment shares between processes: an exception inside
    the poll gives its slots back; slots never given back (a killed process) expire after the
    longest wait and a margin."""
    file_cache = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(tmp_path / "cache"),
        }
    }
    client = uuid.uuid4()
    with override_settings(
        CACHES=file_cache,
        RMS_LONGPOLL_PER_PROCESS=5,
        RMS_LONGPOLL_PER_CLIENT=1,
        RMS_LONGPOLL_TOTAL=5,
    ):
        cache.clear()
        with pytest.raises(RuntimeError), longpoll.slot(client, 30):
            raise RuntimeError("the read failed")
        with longpoll.slot(client, 30):  # given back: free again
            pass

        with time_machine.travel(datetime(2030, 1, 1, tzinfo=UTC), tick=False) as clock:
            dead = longpoll.slot(client, 30)
            dead.__enter__()  # its process is killed: never exited (kept, so never collected)
            with pytest.raises(longpoll.Refused) as refused, longpoll.slot(client, 30):
                pass
            assert refused.value.bound == "client"
            clock.shift(30 + longpoll.SLOT_MARGIN + 1)
            with longpoll.slot(client, 30):
                pass
            del dead
