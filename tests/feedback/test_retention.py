"""Retention: the pass moves old operations and sessions to the Parquet archive, the log stays
verifiable from the checkpoint, the archive verifies, and ``as_of`` before the cut reads it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from feedback import aggregates as agg
from feedback import rebuild, retention
from feedback.models import FeedbackAggregate, FeedbackSession, InjectionEvent, SignalRecord
from rms import explain, verification
from rms.archive_verify import verify_archive
from rms.models import ChainCheckpoint, MemoryObject, Namespace, Operation
from tests.factories import T0, hourly_sessions
from tests.servers import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 60
#: The cut: sessions at T0 + 1 … 60 h; retention 1 day from T0 + 2 days leaves hours ≥ 24.
NOW = T0 + timedelta(days=2)
CUT = T0 + timedelta(days=1)


@pytest.fixture
def archive_dir(tmp_path, settings):
    settings.RMS_ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive"


def build(client_api, sessions=SESSIONS) -> list[str]:
    return hourly_sessions(client_api, sessions, "ret")


def aggregates() -> dict:
    fields = [*agg.FIELDS, "usage_ratio"]
    return {
        str(a.object_id): tuple(getattr(a, f) for f in fields)
        for a in FeedbackAggregate.objects.all()
    }


def retain(days=1):
    ns = Namespace.objects.get(name="support")
    ns.retention_days = days
    ns.save()
    return ns


def extra_heads():
    return FeedbackSession.objects.values_list("id", "head_hash")


def chain_ok() -> dict:
    return verification.verify_chain_all(
        extra_heads=extra_heads(), extra_total=FeedbackSession.objects.count()
    )


def run_pass(batch=retention.BATCH) -> dict:
    return retention.run_namespace(Namespace.objects.get(name="support"), NOW, batch=batch)


@pytest.mark.django_db
def test_a_pass_archives_what_is_older_and_everything_still_verifies(client_api, archive_dir):
    ids = build(client_api)
    before_ops = Operation.objects.count()
    before_aggregates = aggregates()
    states = {oid: client_api.get(f"/api/v1/objects/{oid}").json() for oid in ids}
    early = (T0 + timedelta(hours=5, minutes=30)).isoformat()
    early_state = client_api.get(f"/api/v1/objects/{ids[0]}/state", {"as_of": early}).json()
    early_explain = client_api.get(f"/api/v1/objects/{ids[0]}/explain", {"as_of": early}).json()
    retain(1)

    result = run_pass(batch=60)

    assert result["operations"] > 0 and result["batches"] > 1
    assert Operation.objects.count() == before_ops - result["operations"]
    # sessions before the cut went (with their injections and signals); later ones stay
    assert FeedbackSession.objects.filter(ts__lt=CUT).count() == 0
    assert FeedbackSession.objects.count() == SESSIONS - 23
    assert not InjectionEvent.objects.filter(ts__lt=CUT).exists()
    assert not SignalRecord.objects.filter(ts__lt=CUT).exists()
    assert not Operation.objects.filter(ts__lt=CUT, namespace="support").exclude(
        target_type__in=("namespace", "relationship")
    )
    assert ChainCheckpoint.objects.count() == 4
    # lifetime values kept; a rebuild leaves the archived objects' aggregates alone
    assert aggregates() == before_aggregates
    rebuild.rebuild_aggregates()
    assert aggregates() == before_aggregates
    # the log verifies from the checkpoint, replays, and the archive verifies
    assert chain_ok()["ok"], chain_ok()
    assert verification.verify_replay_all()["ok"]
    for oid in ids:
        obj = MemoryObject.objects.get(pk=oid)
        assert verification.verify_object_chain(obj) is None
        assert verification.verify_object_replay(obj) == []
        now = client_api.get(f"/api/v1/objects/{oid}").json()
        assert now.pop("salience_effective") > 0  # read-time decay moves with the clock
        states[oid].pop("salience_effective")
        assert now == states[oid]
    checked = verify_archive("support")
    assert checked["ok"], checked
    assert checked["operations"] == result["operations"]
    # as_of before the cut: answered from the archive, the same as before the pass
    archived = client_api.get(f"/api/v1/objects/{ids[0]}/state", {"as_of": early})
    assert archived.status_code == 200 and archived.json() == early_state
    assert (
        client_api.get(f"/api/v1/objects/{ids[0]}/explain", {"as_of": early}).json()
        == early_explain
    )
    # a second pass finds nothing more
    assert run_pass()["operations"] == 0


@pytest.mark.django_db
def test_archive_gone_is_410_and_a_changed_byte_is_found(client_api, archive_dir):
    ids = build(client_api, sessions=30)
    retain(1)
    run_pass()
    # a changed byte in an archived file
    victim = next(archive_dir.glob("support/*-operations.parquet"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    result = verify_archive("support")
    assert not result["ok"]
    assert result["mismatches"][0]["reason"] == "sha256 differs"
    # the archive gone: before the cut is 410 in the error shape; after it still answers
    shutil.rmtree(archive_dir)
    early = (T0 + timedelta(hours=3)).isoformat()
    gone = client_api.get(f"/api/v1/objects/{ids[0]}/state", {"as_of": early})
    assert gone.status_code == 410
    assert gone.json()["error"]["code"] == "archived"
    assert "retention cut" in gone.json()["error"]["message"]
    late = (T0 + timedelta(hours=29)).isoformat()
    assert client_api.get(f"/api/v1/objects/{ids[0]}/state", {"as_of": late}).status_code == 200


@pytest.mark.django_db
def test_a_tampered_remaining_log_is_still_found(client_api, archive_dir):
    ids = build(client_api, sessions=30)
    retain(1)
    run_pass()
    first = Operation.objects.filter(target_id=ids[1]).order_by("seq").first()
    Operation.objects.filter(seq=first.seq).delete()  # the first operation after the cut
    broken = verification.verify_object_chain(MemoryObject.objects.get(pk=ids[1]))
    assert broken is not None and "prev_hash" in broken["reason"]
    assert not verify_archive("support")["ok"]


@pytest.mark.django_db
def test_retention_settings_through_the_api(admin_api, client_api, outsider_api, namespace):
    url = "/api/v1/namespaces/support"
    assert admin_api.get(url).json()["retention_days"] is None
    ok = admin_api.patch(url, {"retention_days": 30}, format="json")
    assert ok.status_code == 200 and ok.json()["retention_days"] == 30
    assert Namespace.objects.get(name="support").retention_days == 30
    for bad in (-1, 0, "30", 1.5, True):
        response = admin_api.patch(url, {"retention_days": bad}, format="json")
        assert response.status_code == 400, bad
        assert "retention_days" in response.json()["error"]["fields"]
    assert admin_api.patch(url, {"retention": 3}, format="json").status_code == 400
    assert client_api.patch(url, {"retention_days": 5}, format="json").status_code == 403
    assert outsider_api.patch(url, {"retention_days": 5}, format="json").status_code == 403
    assert (
        admin_api.patch(url, {"retention_days": None}, format="json").json()["retention_days"]
        is None
    )
    created = admin_api.post(
        "/api/v1/namespaces", {"name": "kept", "retention_days": 7}, format="json"
    )
    assert created.status_code == 201 and created.json()["retention_days"] == 7


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import datetime
    import django
    django.setup()
    from feedback import retention
    from rms.models import Namespace
    calls = []
    apply = retention._apply
    def killed_after_manifest(entry, *rest):
        calls.append(entry)
        if len(calls) == 2:  # the second batch's files and manifest are written, nothing deleted
            os.kill(os.getpid(), signal.SIGKILL)
        apply(entry, *rest)
    retention._apply = killed_after_manifest
    retention.run_namespace(
        Namespace.objects.get(name="support"), datetime.fromisoformat(sys.argv[1]), batch=60
    )
    """
)


@pytest.mark.django_db(transaction=True)
def test_sigkilled_mid_pass_then_rerun(client_api, archive_dir, settings):
    build(client_api, sessions=40)
    total = Operation.objects.count()
    retain(1)
    env = subprocess_env(settings, RMS_ARCHIVE_URL=str(archive_dir))
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, NOW.isoformat()], env=env, cwd=ROOT, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert (archive_dir / "support" / "manifest.json").exists()
    remaining = Operation.objects.count()
    assert remaining < total  # the first batch was applied before the kill

    result = run_pass(batch=60)

    archived = verify_archive("support")
    assert archived["ok"], archived
    # every operation is in exactly one place: the database or the archive, never both
    assert Operation.objects.count() + archived["operations"] == total
    assert chain_ok()["ok"]
    assert verification.verify_replay_all()["ok"]
    assert result["operations"] > 0
    assert not FeedbackSession.objects.filter(ts__lt=CUT).exists()


@pytest.mark.django_db
def test_explain_of_an_archived_chain_folds_once(client_api, archive_dir, monkeypatch):
    """With the creation archived, the explanation reads the checkpoint first and folds the
    archived and remaining operations in one pass, before and after the cut, as before it."""
    ids = build(client_api, sessions=30)
    times = [T0 + timedelta(hours=h, minutes=30) for h in (5, 29)]  # before, after the cut
    url = f"/api/v1/objects/{ids[1]}/explain"
    before = [client_api.get(url, {"as_of": t.isoformat()}).json() for t in times]
    retain(1)
    run_pass(batch=40)
    assert ChainCheckpoint.objects.filter(target_id=ids[1]).exists()
    folds = []
    real = explain.explain

    def counted(ops, **kw):
        folds.append(kw["as_of"])
        return real(ops, **kw)

    monkeypatch.setattr(explain, "explain", counted)
    for t, answer in zip(times, before, strict=True):
        response = client_api.get(url, {"as_of": t.isoformat()})
        assert response.status_code == 200, response.json()
        assert response.json() == answer
    assert folds == times  # one fold per request
    created = MemoryObject.objects.get(pk=ids[1]).created_at
    too_early = (created - timedelta(hours=1)).isoformat()
    assert client_api.get(url, {"as_of": too_early}).status_code == 404
    shutil.rmtree(archive_dir)
    gone = client_api.get(url, {"as_of": times[1].isoformat()})
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "archived"
