"""The stored bytes themselves: a ``pg_dump`` of the PostgreSQL database, and the SQLite
database's pages, hold none of the erased strings; a worker SIGKILLed midway leaves nothing
half-erased and the re-run completes it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, transaction

from erasure.models import Erasure
from rms.models import MemoryObject, Namespace, Operation
from rms.redaction import ERASURE_OP, OBJECT_ERASED_OP
from tests.erasure.conftest import (
    ALICE,
    CONTENT,
    CONTEXT,
    CONTEXT_TAG,
    EVIDENCE,
    OTHER_CONTENT,
    SIGNAL_EVIDENCE,
    TAG,
    build_personal_log,
    chain_result,
    erase,
)

EVERYTHING = [CONTENT, OTHER_CONTENT, TAG, EVIDENCE, ALICE, CONTEXT, CONTEXT_TAG, SIGNAL_EVIDENCE]
ROOT = Path(__file__).resolve().parents[2]


def pg_dump() -> str:
    db = connection.settings_dict
    out = subprocess.run(
        ["pg_dump", "--data-only", "-h", db["HOST"] or "127.0.0.1", "-p", str(db["PORT"] or 5432),
         "-U", db["USER"] or "postgres", db["NAME"]],
        capture_output=True, check=True, text=True,
    )  # fmt: skip
    return out.stdout


def sqlite_bytes() -> bytes:
    """The database file and its write-ahead log, as they are on disk.

    Read by another process: closing any descriptor of the file in this one would drop the
    POSIX locks SQLite's connection holds on it, and the test database is then corrupted for
    every later test (SQLite's "How to corrupt a database", section 2.2)."""
    name = Path(connection.settings_dict["NAME"])
    files = [str(f) for f in (name, name.with_name(name.name + "-wal")) if f.exists()]
    return subprocess.run(["cat", *files], capture_output=True, check=True).stdout


@pytest.mark.django_db(transaction=True)
def test_a_pg_dump_holds_no_erased_string(require_postgres, admin_api, client_api):
    build_personal_log(client_api)
    assert all(s in pg_dump() for s in EVERYTHING)
    erase(admin_api, "namespace", None)
    dump = pg_dump()
    assert [s for s in EVERYTHING if s in dump] == []
    assert chain_result()["ok"] is True


@pytest.mark.django_db(transaction=True)
def test_the_sqlite_file_holds_no_erased_string(admin_api, client_api):
    if connection.vendor != "sqlite":
        pytest.skip("the SQLite database's own bytes")
    build_personal_log(client_api)
    assert all(s.encode() in sqlite_bytes() for s in EVERYTHING)
    erase(admin_api, "namespace", None)
    pages = sqlite_bytes()
    assert [s for s in EVERYTHING if s.encode() in pages] == []


def _waiting_for_a_lock(pid_filter: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            # this test database's sessions only: the server is shared with other suites
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND query LIKE %s",
            [pid_filter],
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_erasure_leaves_nothing_half_done(
    require_postgres, admin_api, client_api
):
    log = build_personal_log(client_api)
    body = {"subject": {"kind": "object", "id": log["object"]}, "namespace": "support"}
    erasure_id = admin_api.post("/api/v1/erasures", body, format="json").json()["id"]
    db = connection.settings_dict
    env = {
        **os.environ,
        "RMS_DEVELOPMENT": "true",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "RMS_ERASURE_KEY": settings.RMS_ERASURE_KEY,
        "SECRET_KEY": settings.SECRET_KEY,
    }
    code = f"from erasure import services; services.run({erasure_id!r})"
    with transaction.atomic():
        # hold the erased object's row: the worker blocks on it after rewriting the log
        MemoryObject.objects.select_for_update().get(pk=log["object"])
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(600):
            if _waiting_for_a_lock("UPDATE%rms_memoryobject%") or worker.poll() is not None:
                break
            time.sleep(0.1)
        assert worker.poll() is None, "the worker ended before it reached the object"
        with connection.cursor() as cursor:  # it has rewritten operations in its transaction
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    erasure = Erasure.objects.get(pk=erasure_id)
    assert erasure.state == Erasure.RUNNING  # the receipt says it is not done
    assert Operation.objects.filter(op_type=ERASURE_OP).count() == 0
    assert MemoryObject.objects.get(pk=log["object"]).content == CONTENT
    assert chain_result()["ok"] is True  # nothing half-redacted
    # the re-run (the reconciler re-queues the run of a lost worker) completes it, once
    from erasure import services

    services.run(erasure_id)
    services.run(erasure_id)  # a duplicate message changes nothing
    erasure.refresh_from_db()
    assert erasure.state == Erasure.COMPLETED and erasure.counts["operations"] > 0
    ns = Namespace.objects.get(name="support")
    assert Operation.objects.filter(target_id=ns.uid, op_type=ERASURE_OP).count() == 1
    assert Operation.objects.filter(op_type=OBJECT_ERASED_OP).count() == 1
    assert MemoryObject.objects.get(pk=log["object"]).content == ""
    assert chain_result()["ok"] is True
