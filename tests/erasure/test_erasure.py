"""Erasure of each subject kind: nothing of the subject's personal strings is left anywhere, the
chains still verify, replay still gives every number, and the receipt is on the chain."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from erasure.models import Erasure
from rms import verification
from rms.models import MemoryObject, Namespace, Operation
from rms.redaction import ERASURE_OP, OBJECT_ERASED_OP
from tests.erasure.conftest import (
    ALICE,
    CONTENT,
    CONTEXT,
    CONTEXT_TAG,
    EVIDENCE,
    OTHER_CONTENT,
    SESSION_ID,
    SIGNAL_EVIDENCE,
    TAG,
    chain_result,
    completed,
    erase,
)

pytestmark = pytest.mark.django_db

#: What each kind must remove, and what it must leave.
ERASED = {
    "object": [CONTENT, TAG, EVIDENCE],
    "actor": [ALICE],
    "session": [CONTEXT, CONTEXT_TAG],
    "namespace": [CONTENT, TAG, EVIDENCE, ALICE, CONTEXT, CONTEXT_TAG, OTHER_CONTENT,
                  SIGNAL_EVIDENCE],
}  # fmt: skip
KEPT = {"object": [OTHER_CONTENT, ALICE, CONTEXT], "actor": [CONTENT], "session": [CONTENT]}


def database_text() -> str:
    """Every row of every table, as text: on PostgreSQL ``pg_dump``'s output (see
    test_erasure_pg), here the rows as the database returns them."""
    out = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            out.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(out)


def numbers(oid) -> list:
    return [
        (op.op_type, op.state)
        for op in Operation.objects.filter(target_id=oid).order_by("seq")
        if op.state is not None
    ]


def subject_of(kind, log):
    return {"object": log["object"], "actor": ALICE, "session": SESSION_ID, "namespace": None}[kind]


@pytest.mark.parametrize("kind", ["object", "actor", "session", "namespace"])
def test_each_kind_erases_its_strings_and_keeps_the_chain_and_the_numbers(
    kind, admin_api, client_api, personal_log
):
    before = {oid: numbers(oid) for oid in personal_log.values()}
    assert all(s in database_text() for s in ERASED[kind])
    receipt = erase(admin_api, kind, subject_of(kind, personal_log))
    assert completed(receipt), receipt
    assert receipt["counts"]["operations"] > 0
    text = database_text()
    assert [s for s in ERASED[kind] if s in text] == []
    assert all(s in text for s in KEPT.get(kind, []))
    # the chains verify, replay gives every number, the receipt is the namespace's last op
    assert chain_result()["ok"] is True, chain_result()
    assert verification.verify_replay_all()["ok"] is True
    if kind in ("actor", "session"):  # evidence kept: the states are untouched
        assert {oid: numbers(oid) for oid in personal_log.values()} == before
    ns = Namespace.objects.get(name="support")
    last = Operation.objects.filter(target_id=ns.uid).order_by("seq").last()
    assert last.op_type == ERASURE_OP and str(last.id) == receipt["operation_id"]
    assert last.hash == ns.head_hash
    assert len(last.payload["redacted"]) == receipt["counts"]["operations"]


def test_numbers_replay_bit_identically_after_an_object_erasure(
    admin_api, client_api, personal_log
):
    oid = personal_log["object"]
    before = [(t, {k: v for k, v in s.items() if k != "evidence_ids"}) for t, s in numbers(oid)]
    url, as_of = f"/api/v1/objects/{oid}/state", {"as_of": "2026-06-01T02:00:00Z"}
    then = client_api.get(url, as_of).json()
    erase(admin_api, "object", oid)
    after = [(t, {k: v for k, v in s.items() if k != "evidence_ids"}) for t, s in numbers(oid)]
    assert after == before  # every float, bit for bit (== on the JSON numbers)
    obj = MemoryObject.objects.get(pk=oid)
    assert obj.content == "" and obj.domain_tags == []
    assert obj.evidence_ids and EVIDENCE not in obj.evidence_ids  # renamed, not dropped
    assert Operation.objects.filter(target_id=oid, op_type=OBJECT_ERASED_OP).count() == 1
    now = client_api.get(url, as_of).json()
    assert "evidence_ids" in json.dumps(then)
    drop = lambda d: {k: v for k, v in d.items() if k not in ("evidence_ids", "content")}  # noqa: E731
    assert now["content"] == ""
    assert drop(now) == drop(then) and now["confidence"] == then["confidence"]


@pytest.mark.django_db(transaction=True)  # the feed shows committed transactions only
def test_the_feed_carries_object_erased_and_no_erased_string(admin_api, client_api, personal_log):
    receipt = erase(admin_api, "object", personal_log["object"])
    page = admin_api.get("/api/v1/changes", {"limit": 1000}).json()
    erased = [e for e in page["results"] if e["type"] == "object.erased"]
    assert [e["target_id"] for e in erased] == [personal_log["object"]]
    assert erased[0]["data"] == {"subject_kind": "object", "erasure_id": receipt["id"]}
    assert CONTENT not in json.dumps(page)


def test_erasing_again_or_nothing_is_a_clear_answer(admin_api, client_api, personal_log):
    first = erase(admin_api, "object", personal_log["object"])
    again = erase(admin_api, "object", personal_log["object"])
    assert completed(again) and again["counts"]["operations"] == 0
    assert again["message"].startswith("Nothing to erase")
    oid = personal_log["object"]
    assert Operation.objects.filter(target_id=oid, op_type=OBJECT_ERASED_OP).count() == 1
    nobody = erase(admin_api, "actor", "nobody-at-all")
    assert completed(nobody) and not any(nobody["counts"].values())
    assert nobody["message"].startswith("Nothing to erase")
    assert first["id"] != again["id"]
    assert chain_result()["ok"] is True


def test_the_receipt_never_shows_the_actor_id(admin_api, client_api, personal_log):
    receipt = erase(admin_api, "actor", ALICE)
    assert receipt["subject"]["kind"] == "actor"
    assert ALICE not in json.dumps(receipt)
    assert Erasure.objects.get(pk=receipt["id"]).pending_subject == ""


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_and_roles(admin_api, operator_api, client_api, other_namespace):
    url = "/api/v1/erasures"
    body = {"subject": {"kind": "planet", "id": "x"}, "namespace": "support"}
    bad = admin_api.post(url, body, format="json")
    assert bad.status_code == 400 and "subject.kind" in bad.json()["error"]["fields"]
    not_uuid = {"subject": {"kind": "object", "id": "nope"}, "namespace": "support"}
    assert admin_api.post(url, not_uuid, format="json").status_code == 400
    assert admin_api.post(url, [1], format="json").status_code == 400
    ok = {"subject": {"kind": "actor", "id": ALICE}, "namespace": "support"}
    assert operator_api.post(url, ok, format="json").status_code == 403
    assert client_api.post(url, ok, format="json").status_code == 403
    missing = {**ok, "namespace": "no-such-namespace"}
    assert admin_api.post(url, missing, format="json").status_code == 404
    assert admin_api.get(f"{url}/not-a-uuid").status_code == 404
    assert admin_api.get(f"{url}/00000000-0000-4000-8000-000000000000").status_code == 404
    tasks = admin_api.post("/api/v1/tasks", {"kind": "erasure"}, format="json")
    assert tasks.status_code == 400
    # A NUL in any text field is the caller's mistake (PostgreSQL refuses to store one).
    for nul in (
        {**ok, "namespace": "sup\x00port"},
        {**ok, "subject": {"kind": "actor", "id": "al\x00ice"}},
        {**ok, "reason": "because\x00"},
    ):
        refused = admin_api.post(url, nul, format="json")
        assert refused.status_code == 400, refused.content


def test_a_namespace_scoped_admin_erases_only_in_its_namespace(other_namespace, namespace):
    from rest_framework.test import APIClient

    from tests.factories import make_client

    row, token = make_client("ns-admin", "admin", ["billing"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    elsewhere = {"subject": {"kind": "actor", "id": ALICE}, "namespace": "support"}
    response = api.post("/api/v1/erasures", elsewhere, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"]
    own = {"subject": {"kind": "actor", "id": ALICE}, "namespace": "billing"}
    assert api.post("/api/v1/erasures", own, format="json").status_code == 202


def test_a_failed_run_changes_nothing_and_says_so(admin_api, client_api, personal_log, monkeypatch):
    from erasure import services, tables

    def broken(scope, rule):
        raise RuntimeError("the database went away")

    body = {"subject": {"kind": "object", "id": personal_log["object"]}, "namespace": "support"}
    erasure_id = admin_api.post("/api/v1/erasures", body, format="json").json()["id"]
    monkeypatch.setattr(tables, "redact_signals", broken)
    with pytest.raises(RuntimeError):
        services.run(erasure_id)
    receipt = admin_api.get(f"/api/v1/erasures/{erasure_id}").json()
    assert receipt["state"] == "failed" and "nothing was changed" in receipt["message"]
    assert CONTENT in database_text()
    monkeypatch.undo()
    assert services.run(erasure_id)["state"] == "completed"
    assert CONTENT not in database_text()


def test_an_actor_erasure_erases_the_objects_it_created(admin_api, namespace):
    from tests.factories import make_client, make_object

    author, _ = make_client(ALICE, "client", ["support"])
    obj = make_object(author, "support", content=CONTENT)
    assert obj.created_by == ALICE
    receipt = erase(admin_api, "actor", ALICE)
    obj.refresh_from_db()
    assert obj.content == "" and obj.created_by == receipt["subject"]["id"]
    assert Operation.objects.filter(target_id=obj.pk, op_type=OBJECT_ERASED_OP).count() == 1
    assert CONTENT not in database_text()
    # the API account of that name is an account, not the log: only the log forgets it
    assert not Operation.objects.filter(actor_id=ALICE).exists()
    assert ALICE not in json.dumps(list(Operation.objects.values_list("payload", flat=True)))
    assert chain_result()["ok"] is True and verification.verify_replay_all()["ok"] is True
