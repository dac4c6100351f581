"""Database connections between Celery tasks (rms/celery.py): kept while healthy and younger than
CONN_MAX_AGE, closed when obsolete or broken, untouched for eager tasks — instead of Celery's
Django fix-up closing them around every task (a new PostgreSQL backend per fanned-out chunk)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun
from django.db import connection, transaction

from rms.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


def worker_task(eager: bool = False):
    return SimpleNamespace(request=SimpleNamespace(is_eager=eager))


def open_connection():
    connection.ensure_connection()
    return connection.connection


@pytest.mark.parametrize("signal", [task_prerun, task_postrun], ids=["prerun", "postrun"])
def test_a_healthy_connection_is_kept_between_tasks(signal):
    raw = open_connection()
    connection.close_at = None  # persistent (CONN_MAX_AGE None); on PostgreSQL 60 s from now
    signal.send(sender=None, task_id="t", task=worker_task())
    assert connection.connection is raw


@pytest.mark.parametrize("signal", [task_prerun, task_postrun], ids=["prerun", "postrun"])
def test_an_obsolete_connection_is_closed_between_tasks(signal):
    open_connection()
    connection.close_at = time.monotonic() - 1  # older than CONN_MAX_AGE
    signal.send(sender=None, task_id="t", task=worker_task())
    assert connection.connection is None
    with connection.cursor() as cur:  # the next task opens a new one
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)


def test_a_connection_that_failed_is_closed_between_tasks(monkeypatch):
    open_connection()
    connection.close_at = None
    connection.errors_occurred = True
    monkeypatch.setattr(connection, "is_usable", lambda: False)
    task_postrun.send(sender=None, task_id="t", task=worker_task())
    assert connection.connection is None


def test_eager_tasks_and_open_transactions_are_left_alone():
    raw = open_connection()
    connection.close_at = time.monotonic() - 1
    task_postrun.send(sender=None, task_id="t", task=worker_task(eager=True))
    assert connection.connection is raw
    with transaction.atomic():
        task_postrun.send(sender=None, task_id="t", task=worker_task())
        assert connection.connection is raw  # a worker task run inside a caller's transaction
    connection.close_at = None


def test_celerys_django_fixup_no_longer_closes_every_task():
    raw = open_connection()
    connection.close_at = None
    fixup = DjangoWorkerFixup(app)
    assert fixup.db_reuse_max == 1000
    for _ in range(10):  # prerun and postrun of five tasks
        fixup.close_database()
    assert connection.connection is raw
