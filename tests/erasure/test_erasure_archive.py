"""Erasure reaches the retention archive: the Parquet files and the chain checkpoints lose the
subject's personal fields, the manifest names the new files, the receipt lists the archived
redacted operations, and both the archive and the log still verify."""

from __future__ import annotations

import hashlib
import io
import json
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from erasure import services
from erasure.models import Erasure
from feedback import retention
from feedback.models import FeedbackSession, SignalRecord
from rms import verification
from rms.archive_verify import verify_archive
from rms.models import ChainCheckpoint, MemoryObject, Namespace, Operation
from rms.oplog import canonical_json
from taskruns import tasks
from taskruns.models import TaskRun
from tests.erasure.conftest import ALICE, CONTENT, EVIDENCE, TAG, chain_result, erase, numbers
from tests.factories import HUMAN, T0, api_object, post, session
from tests.servers import subprocess_env

ROOT = Path(__file__).resolve().parents[2]

NOW = T0 + timedelta(days=2)
#: Sessions an hour apart from T0 + 1 h; a retention of one day at NOW cuts at T0 + 24 h.
SESSIONS = 40
ALICE_SIGNAL = {"actor_id": ALICE, "actor_type": "HUMAN_USER"}


@pytest.fixture
def archive_dir(tmp_path, settings):
    settings.RMS_ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive" / "support"


def build(client_api) -> list[str]:
    """An object about Alice, two others; sessions on both sides of the cut in which Alice and
    another user confirm and correct."""
    alice_obj = api_object(
        client_api, content=CONTENT, domain_tags=[TAG], evidence_ids=[EVIDENCE], ts=T0.isoformat()
    )
    others = [api_object(client_api, content=f"other-{i}", ts=T0.isoformat()) for i in range(2)]
    ids = [alice_obj, *others]
    for k in range(SESSIONS):
        who = ALICE_SIGNAL if k % 2 else HUMAN
        body = session(
            f"arc-{k}",
            [(oid, 10 + i) for i, oid in enumerate(ids)],
            [(ids[k % 3], "CONFIRMED", who), (ids[(k + 1) % 3], "CORRECTED", ALICE_SIGNAL)],
            outcome="SUCCESS",
            hours=k + 1,
        )
        assert post(client_api, body).status_code == 201
    return ids


def archive_pass() -> dict:
    ns = Namespace.objects.get(name="support")
    ns.retention_days = 1
    ns.save()
    return retention.run_namespace(ns, NOW, batch=50)


def archive_text(folder: Path) -> str:
    """Every row of every file in the archive's folder (Parquet decoded: its bytes are
    compressed, so a search of the raw bytes would prove nothing), as one text."""
    parts = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".parquet":
            parts.append(repr(pq.read_table(path).to_pylist()))
        else:
            parts.append(path.read_text())
    return "\n".join(parts)


def database_text() -> str:
    rows = [
        *Operation.objects.values_list("payload", "state", "actor_id"),
        *SignalRecord.objects.values_list("reason", "actor_id"),
        *ChainCheckpoint.objects.values_list("fold"),
        *MemoryObject.objects.values_list("content", "domain_tags", "evidence_ids", "created_by"),
    ]
    return repr(rows)


def states(client_api, ids, as_of) -> dict:
    out = {}
    for oid in ids:
        response = client_api.get(f"/api/v1/objects/{oid}/state", {"as_of": as_of})
        assert response.status_code == 200, response.json()
        out[oid] = response.json()
    return out


def tamper_a_number(folder: Path, hashes: set[str]) -> None:
    """Change one number in an archived redacted operation and fix the manifest's sha256 (an
    attacker who can write the archive): only the redaction's digest can catch it."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for batch in manifest["batches"]:
        meta = batch["files"]["operations"]
        table = pq.read_table(folder / meta["name"])
        rows = table.to_pylist()
        for row in rows:
            payload = json.loads(row["payload"])
            found = [k for k, v in sorted(payload.items()) if type(v) in (int, float)]
            if row["hash"] in hashes and found:
                payload[found[0]] += 1
                row["payload"] = canonical_json(payload)
                buf = io.BytesIO()
                pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), buf)
                (folder / meta["name"]).write_bytes(buf.getvalue())
                meta["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
                (folder / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
                return
    raise AssertionError("no archived redacted operation with a number in its payload")


def recorded(folder: Path, erasure_id: str) -> dict:
    """What the archive rewrite recorded for an erasure: the file the manifest names (its
    sha256 as listed), not the manifest itself, which stays small."""
    entry = json.loads((folder / "manifest.json").read_text())["erasures"][erasure_id]
    data = (folder / entry["name"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"] and "redacted" not in entry
    return json.loads(data)


def receipt_pairs(receipt: dict) -> list:
    return Operation.objects.get(id=receipt["operation_id"]).payload["redacted"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["actor", "object"])
def test_erasure_rewrites_the_archive_and_both_still_verify(
    client_api, admin_api, archive_dir, kind
):
    ids = build(client_api)
    early = (T0 + timedelta(hours=6, minutes=30)).isoformat()
    before = states(client_api, ids, early)
    result = archive_pass()
    assert result["operations"] > 0 and result["batches"] > 1
    erased = ALICE if kind == "actor" else CONTENT
    assert erased in archive_text(archive_dir)  # the archive held it
    assert erased in database_text()  # and so did the log after the cut
    archived_hashes = set()
    for name in archive_dir.glob("*-operations.parquet"):
        archived_hashes.update(pq.read_table(name).column("hash").to_pylist())

    subject = ALICE if kind == "actor" else ids[0]
    receipt = erase(admin_api, kind, subject)

    assert receipt["state"] == Erasure.COMPLETED
    assert erased not in archive_text(archive_dir)
    assert erased not in database_text()
    if kind == "object":
        for text in (TAG, EVIDENCE):
            assert text not in archive_text(archive_dir) and text not in database_text()
    listed = {h for h, _ in receipt_pairs(receipt)}
    in_archive = listed & archived_hashes
    assert receipt["counts"]["archived_operations"] == len(in_archive) > 0
    assert len(listed) == receipt["counts"]["operations"]  # listed once each
    assert listed - archived_hashes  # and the log's own rows too
    checked = verify_archive("support")
    assert checked["ok"], checked
    assert checked["operations"] == result["operations"]
    assert chain_result()["ok"], chain_result()
    assert verification.verify_replay_all()["ok"], verification.verify_replay_all()
    # before the cut, from the archive: the same numbers as before the pass and the erasure
    after = states(client_api, ids, early)
    assert {k: numbers(v) for k, v in after.items()} == {k: numbers(v) for k, v in before.items()}
    if kind == "actor":
        assert after == before  # an actor's erasure leaves evidence ids and states alone

    tamper_a_number(archive_dir, in_archive)
    found = verify_archive("support")
    assert not found["ok"]
    # found where it was changed (the chain's later batches then no longer link either)
    assert found["mismatches"][0]["reason"] == "hash does not match the operation's content"


@pytest.mark.django_db(transaction=True)
def test_a_run_killed_after_the_archive_rewrite_completes_once(
    client_api, admin_api, archive_dir, monkeypatch
):
    """Killed between the file rewrite (manifest written) and the receipt: the database rolled
    back, the rerun reads the archived pairs back from the manifest and lists each once."""
    build(client_api)
    archive_pass()
    body = {"subject": {"kind": "actor", "id": ALICE}, "namespace": "support", "reason": "x"}
    out = admin_api.post("/api/v1/erasures", body, format="json").json()

    def killed(*args, **kwargs):
        raise RuntimeError("worker killed")

    with monkeypatch.context() as patch:
        patch.setattr(services.tables, "redact_operations", killed)
        assert tasks.run_task.run(out["task"]) == TaskRun.FAILED
    manifest = json.loads((archive_dir / "manifest.json").read_text())
    written = recorded(archive_dir, out["id"])["redacted"]
    assert written and ALICE not in archive_text(archive_dir)
    assert ALICE in database_text()  # the log's part rolled back
    assert Erasure.objects.get(pk=out["id"]).state == Erasure.FAILED

    TaskRun.objects.filter(pk=out["task"]).update(state=TaskRun.QUEUED)
    assert tasks.run_task.run(out["task"]) == TaskRun.SUCCEEDED
    receipt = admin_api.get(f"/api/v1/erasures/{out['id']}").json()
    pairs = receipt_pairs(receipt)
    assert len(pairs) == len({h for h, _ in pairs})  # nothing doubled
    assert {tuple(p) for p in written} <= {tuple(p) for p in pairs}
    assert receipt["counts"]["archived_operations"] == len(written)
    assert ALICE not in database_text() and ALICE not in archive_text(archive_dir)
    assert verify_archive("support")["ok"], verify_archive("support")
    assert chain_result()["ok"]
    # a file the first run replaced is gone; the manifest names only files that exist
    names = {p.name for p in archive_dir.iterdir()}
    for batch in manifest["batches"]:
        assert {f["name"] for f in batch["files"].values()} <= names
    assert FeedbackSession.objects.exists()


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    import django
    django.setup()
    from erasure import services
    def killed(*args):  # the archive is rewritten and its manifest written; no receipt yet
        os.kill(os.getpid(), signal.SIGKILL)
    services._commit = killed
    services.run(sys.argv[1])
    """
)


@pytest.mark.django_db(transaction=True)
def test_sigkilled_between_the_archive_and_the_receipt_then_rerun(
    client_api, admin_api, archive_dir, settings
):
    build(client_api)
    archive_pass()
    body = {"subject": {"kind": "actor", "id": ALICE}, "namespace": "support", "reason": "x"}
    erasure_id = admin_api.post("/api/v1/erasures", body, format="json").json()["id"]
    env = subprocess_env(
        settings,
        RMS_ARCHIVE_URL=settings.RMS_ARCHIVE_URL,
        SECRET_KEY=settings.SECRET_KEY,
        RMS_ERASURE_KEY=settings.RMS_ERASURE_KEY,
    )
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, erasure_id], env=env, cwd=ROOT, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    written = recorded(archive_dir, erasure_id)
    assert written["redacted"] and ALICE not in archive_text(archive_dir)
    assert ALICE in database_text()
    assert Erasure.objects.get(pk=erasure_id).state == Erasure.RUNNING
    # the rerun takes over the lock the killed run left (it names the erasure)
    assert services.run(erasure_id)["state"] == Erasure.COMPLETED

    receipt = admin_api.get(f"/api/v1/erasures/{erasure_id}").json()
    pairs = receipt_pairs(receipt)
    assert len(pairs) == len({h for h, _ in pairs})
    assert {tuple(p) for p in written["redacted"]} <= {tuple(p) for p in pairs}
    assert ALICE not in database_text() and ALICE not in archive_text(archive_dir)
    assert verify_archive("support")["ok"], verify_archive("support")
    assert chain_result()["ok"]
    assert verification.verify_replay_all()["ok"]
