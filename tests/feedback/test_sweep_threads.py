"""The sweep's chunks on several threads and connections (PostgreSQL, outside a transaction):
the same decisions and state as one thread, the same crash-and-rerun guarantee."""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from django.db import connection

from feedback import sweep as sweep_mod
from feedback.sweep import sweep
from rms.models import Operation
from tests.factories import SWEEP_NOW as NOW
from tests.factories import build_sweep_twin, make_namespace, sweep_state

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXPECTED = {"examined": 7, "penalized": 4, "exempt": 2, "not_penalized": 1}


@pytest.fixture
def twins(require_postgres, admin_api):
    make_namespace("threads")
    make_namespace("single")
    admin = admin_api.row
    threaded = build_sweep_twin(admin_api, admin, "threads")
    return threaded, build_sweep_twin(admin_api, admin, "single")


def run_threads(monkeypatch, **kwargs) -> tuple[dict, set[str]]:
    """A sweep with workers=3 and chunks of 2; which threads handled chunks."""
    names: set[str] = set()
    real = sweep_mod._sweep_chunk

    def spy(*args, **kw):
        names.add(threading.current_thread().name)
        assert connection.in_atomic_block  # each chunk in its own transaction
        return real(*args, **kw)

    monkeypatch.setattr(sweep_mod, "_sweep_chunk", spy)
    out = sweep(chunk_size=2, workers=3, now=NOW, **kwargs)
    return out, names


def test_threads_decide_and_write_what_one_thread_does(twins, monkeypatch):
    threaded, single = twins
    fractions: list[float] = []
    out, names = run_threads(monkeypatch, namespace="threads", progress=fractions.append)
    assert names and all(n.startswith("sweep-") for n in names)  # never the caller's thread
    assert {k: out[k] for k in EXPECTED} == EXPECTED and out["namespaces"] == ["threads"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) == 4
    monkeypatch.undo()
    alone = sweep(namespace="single", now=NOW, workers=1)
    assert {k: alone[k] for k in EXPECTED} == EXPECTED
    assert sweep_state(threaded) == sweep_state(single)
    assert sweep(namespace="threads", now=NOW)["examined"] == 0  # idempotent rerun


def test_a_failing_chunk_stops_the_sweep_and_a_rerun_finishes_it(twins, monkeypatch):
    threaded, single = twins
    real = sweep_mod._check_object
    calls = {"n": 0}
    lock = threading.Lock()

    def fail_once(*args, **kwargs):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 3:
            raise RuntimeError("worker lost")
        return real(*args, **kwargs)

    with mock.patch.object(sweep_mod, "_check_object", fail_once), pytest.raises(RuntimeError):
        sweep(namespace="threads", chunk_size=2, workers=3, now=NOW)
    # The failed chunk rolled back; others may have committed. Nothing is half-written:
    written = Operation.objects.filter(op_type="IGNORED_CHECK", namespace="threads").count()
    assert written < 7
    sweep(namespace="threads", chunk_size=2, workers=3, now=NOW)
    sweep(namespace="single", now=NOW, workers=1)
    assert sweep_state(threaded) == sweep_state(single)


def test_inside_a_transaction_the_sweep_stays_on_the_caller_s_connection(twins, monkeypatch):
    from django.db import transaction

    names: set[str] = set()
    real = sweep_mod._sweep_chunk

    def spy(*args, **kw):
        names.add(threading.current_thread().name)
        return real(*args, **kw)

    monkeypatch.setattr(sweep_mod, "_sweep_chunk", spy)
    with transaction.atomic():
        out = sweep(namespace="threads", chunk_size=2, workers=3, now=NOW)
    assert out["examined"] == 7 and names == {threading.current_thread().name}


def test_a_failing_progress_report_stops_the_sweep_once(twins):
    threaded, single = twins
    calls: list[float] = []

    class Lost(Exception):
        pass

    def report(fraction: float) -> None:
        calls.append(fraction)
        raise Lost(fraction)

    with pytest.raises(Lost):
        sweep(namespace="threads", chunk_size=2, workers=3, now=NOW, progress=report)
    assert len(calls) == 1  # chunks finishing after the failure are not reported again
    sweep(namespace="threads", chunk_size=2, workers=3, now=NOW)
    sweep(namespace="single", now=NOW, workers=1)
    assert sweep_state(threaded) == sweep_state(single)
