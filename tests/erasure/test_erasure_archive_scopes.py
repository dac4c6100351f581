"""Erasure of a session and of a whole namespace whose log is partly archived: the Parquet files,
the chain files and the manifest lose every erased string (searched in the decoded columns, not
only the compressed bytes), the archive and the log still verify, ``as_of`` before the cut
answers from the archive with the same numbers, and a second erasure is a clear answer."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from erasure.models import Erasure
from feedback import retention
from feedback.models import FeedbackSession, SignalRecord
from rms import verification
from rms.archive_verify import verify_archive
from rms.models import ChainCheckpoint, MemoryObject, Namespace, Operation
from tests.erasure.conftest import (
    ALICE,
    CONTENT,
    CONTEXT,
    CONTEXT_TAG,
    EVIDENCE,
    SIGNAL_EVIDENCE,
    TAG,
    chain_result,
    erase,
)
from tests.factories import T0, api_object, post, session

NOW = T0 + timedelta(days=2)
#: Sessions an hour apart from T0 + 1 h; a retention of one day at NOW cuts at T0 + 24 h.
SESSIONS = 36
#: Alice's conversation: every other session, on both sides of the cut.
SESSION_ID = "conv-alice-archived-8812"
BOB = "bob-hr-manager-9921"
OTHER_CONTENT = "Bob-salary-band-ff63"
#: The other conversations' texts: a session erasure leaves them, a namespace erasure does not.
OTHER_CONTEXT = "context-of-someone-else-{}"
EARLY = T0 + timedelta(hours=6, minutes=30)


@pytest.fixture
def archive_dir(tmp_path, settings):
    settings.RMS_ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive" / "support"


def build(client_api) -> list[str]:
    """An object about Alice, one about Bob, one plain; Alice's conversation every other hour
    (context, tags, her signals with evidence), someone else's in between."""
    ids = [
        api_object(
            client_api, content=CONTENT, domain_tags=[TAG], evidence_ids=[EVIDENCE],
            ts=T0.isoformat(),
        ),
        api_object(client_api, content=OTHER_CONTENT, ts=T0.isoformat()),
        api_object(client_api, content="plain-fact", ts=T0.isoformat()),
    ]  # fmt: skip
    alice = {"actor_id": ALICE, "actor_type": "HUMAN_USER", "evidence_ids": [SIGNAL_EVIDENCE]}
    bob = {"actor_id": BOB, "actor_type": "HUMAN_USER"}
    for k in range(SESSIONS):
        mine = k % 2 == 0
        who = alice if mine else bob
        body = session(
            f"scope-{k}",
            [(oid, 10 + i) for i, oid in enumerate(ids)],
            [(ids[k % 3], "CONFIRMED", who), (ids[(k + 1) % 3], "CORRECTED", bob)],
            outcome="SUCCESS",
            hours=k + 1,
            session_id=SESSION_ID if mine else f"conv-other-{k}",
            context_text=CONTEXT if mine else OTHER_CONTEXT.format(k),
            context_tags=[CONTEXT_TAG] if mine else ["ctx-other"],
        )
        assert post(client_api, body).status_code == 201
    return ids


def archive_pass() -> dict:
    ns = Namespace.objects.get(name="support")
    ns.retention_days = 1
    ns.save()
    result = retention.run_namespace(ns, NOW, batch=50)
    assert result["operations"] > 0 and result["batches"] > 1 and result["sessions"] > 0
    return result


def _decoded(value) -> list:
    """A cell and, when it is JSON text (the payload, state, record and tag columns), its
    decoded value: a string JSON-escaped in the text is found in the decoded form."""
    out = [value]
    if isinstance(value, str) and value[:1] in ("[", "{"):
        out.append(json.loads(value))
    return out


def archive_text(folder: Path) -> str:
    """Every file of the archive's folder: its raw bytes, and for a Parquet file every cell of
    every column decoded from those bytes (compressed pages would hide a string from a search
    of the raw bytes alone); the manifest and the chain files as text and decoded JSON."""
    parts = []
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        parts.append(data.decode("latin-1"))
        if path.suffix == ".parquet":
            table = pq.read_table(io.BytesIO(data))
            for name in table.column_names:
                cells = table.column(name).to_pylist()
                parts.append(repr([d for cell in cells for d in _decoded(cell)]))
        else:
            parts.append(repr(json.loads(data)))
    return "\n".join(parts)


def database_text() -> str:
    rows = [
        *Operation.objects.values_list("payload", "state", "actor_id"),
        *SignalRecord.objects.values_list("reason", "actor_id"),
        *ChainCheckpoint.objects.values_list("fold"),
        *MemoryObject.objects.values_list("content", "domain_tags", "evidence_ids", "created_by"),
        *FeedbackSession.objects.values_list("context_text", "context_tags", "stored_record"),
    ]
    return repr(rows)


def numbers(value):
    """The numbers of a JSON answer, in order (what erasure must never change)."""
    if isinstance(value, dict):
        return [(k, numbers(v)) for k, v in sorted(value.items()) if numbers(v) != []]
    if isinstance(value, list):
        return [n for v in value for n in ([numbers(v)] if numbers(v) != [] else [])]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return []
    return value


def answers(client_api, ids) -> dict:
    """``state`` and ``explain`` of each object at EARLY (before the cut: from the archive)."""
    out = {}
    for oid in ids:
        for what in ("state", "explain"):
            response = client_api.get(f"/api/v1/objects/{oid}/{what}", {"as_of": EARLY})
            assert response.status_code == 200, response.json()
            out[oid, what] = response.json()
    return out


def archived_hashes(folder: Path) -> set[str]:
    out = set()
    for path in folder.glob("*-operations*.parquet"):
        out.update(pq.read_table(path).column("hash").to_pylist())
    return out


def all_verify(result: dict) -> None:
    checked = verify_archive("support")
    assert checked["ok"], checked
    assert checked["operations"] == result["operations"]
    assert chain_result()["ok"], chain_result()
    replayed = verification.verify_replay_all()
    assert replayed["ok"], replayed


def files_of(folder: Path) -> dict:
    manifest = json.loads((folder / "manifest.json").read_text())
    return {
        (b["number"], table): (meta["name"], meta["sha256"])
        for b in manifest["batches"]
        for table, meta in [*b["files"].items(), ("chains", b["chains_file"])]
    }


def erase_again(admin_api, archive_dir, kind, subject) -> None:
    """A second erasure of the same subject: completed, nothing to erase, the archive's files
    untouched, and everything still verifies."""
    files = files_of(archive_dir)
    again = erase(admin_api, kind, subject)
    assert again["state"] == Erasure.COMPLETED
    assert again["message"].startswith("Nothing to erase")
    assert not any(again["counts"].values()), again["counts"]
    assert Operation.objects.get(id=again["operation_id"]).payload["redacted"] == []
    assert files_of(archive_dir) == files


@pytest.mark.django_db(transaction=True)
def test_a_session_partly_archived_is_erased_everywhere(client_api, admin_api, archive_dir):
    ids = build(client_api)
    before = answers(client_api, ids)
    result = archive_pass()
    erased = (CONTEXT, CONTEXT_TAG)
    kept = (OTHER_CONTEXT.format(1), OTHER_CONTEXT.format(SESSIONS - 1), CONTENT, ALICE, BOB)
    text = archive_text(archive_dir)
    assert all(s in text for s in erased)
    assert all(s in database_text() for s in erased)
    assert OTHER_CONTEXT.format(1) in text  # an archived session of someone else
    hashes = archived_hashes(archive_dir)

    receipt = erase(admin_api, "session", SESSION_ID)

    assert receipt["state"] == Erasure.COMPLETED and receipt["subject"]["id"] == SESSION_ID
    text, db = archive_text(archive_dir), database_text()
    for s in erased:
        assert s not in text and s not in db, s
    for s in kept:  # only the session's own fields went
        assert s in text + db, s
    assert OTHER_CONTEXT.format(1) in text and OTHER_CONTEXT.format(SESSIONS - 1) in db
    listed = {h for h, _ in Operation.objects.get(id=receipt["operation_id"]).payload["redacted"]}
    counts = receipt["counts"]
    assert counts["archived_operations"] == len(listed & hashes) > 0
    assert counts["operations"] == len(listed) > counts["archived_operations"]  # the log's too
    assert counts["sessions"] > 0  # the sessions still in the database
    # the archived sessions' operations were the session's only: its FEEDBACK_SESSION and the
    # FEEDBACK_EVENTs of its signals, nothing of another conversation
    archived_ops = [
        row
        for path in archive_dir.glob("*-operations*.parquet")
        for row in pq.read_table(path).to_pylist()
        if row["hash"] in listed
    ]
    assert archived_ops and {row["session_id"] for row in archived_ops} == {SESSION_ID}
    all_verify(result)
    after = answers(client_api, ids)
    assert after == before  # a session's erasure renames nothing the answers show

    erase_again(admin_api, archive_dir, "session", SESSION_ID)
    all_verify(result)


@pytest.mark.django_db(transaction=True)
def test_a_namespace_partly_archived_is_erased_everywhere(client_api, admin_api, archive_dir):
    ids = build(client_api)
    before = answers(client_api, ids)
    result = archive_pass()
    erased = (
        CONTENT, OTHER_CONTENT, TAG, EVIDENCE, SIGNAL_EVIDENCE, ALICE, BOB, CONTEXT, CONTEXT_TAG,
        OTHER_CONTEXT.format(1), OTHER_CONTEXT.format(SESSIONS - 1), "ctx-other", "plain-fact",
    )  # fmt: skip
    text, db = archive_text(archive_dir), database_text()
    assert [s for s in erased if s not in text + db] == []
    hashes = archived_hashes(archive_dir)

    receipt = erase(admin_api, "namespace", None)

    assert receipt["state"] == Erasure.COMPLETED
    text, db = archive_text(archive_dir), database_text()
    assert [s for s in erased if s in text] == []
    assert [s for s in erased if s in db] == []
    listed = {h for h, _ in Operation.objects.get(id=receipt["operation_id"]).payload["redacted"]}
    assert hashes <= listed  # every archived operation held a personal field (an actor id)
    assert receipt["counts"]["archived_operations"] == len(hashes)
    assert receipt["counts"]["checkpoints"] == ChainCheckpoint.objects.count() > 0
    all_verify(result)
    after = answers(client_api, ids)
    # evidence ids are renamed in the states; every number is the same
    assert {k: numbers(v) for k, v in after.items()} == {k: numbers(v) for k, v in before.items()}
    assert EVIDENCE not in repr(after)

    erase_again(admin_api, archive_dir, "namespace", None)
    all_verify(result)
