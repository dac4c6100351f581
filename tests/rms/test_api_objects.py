"""The core API (API.md): objects, namespaces, health, schema; roles, scope and error shapes."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from rms.models import MemoryObject, Namespace, Operation

pytestmark = pytest.mark.django_db

OBJ = {"namespace": "support", "content": "Alice prefers Python", "epistemic_type": "ASSERTED"}


def assert_error(response, status: int, code: str | None = None, field: str | None = None):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code:
        assert body["error"]["code"] == code
    if field:
        assert field in body["error"]["fields"], body
    return body["error"]


def nothing_written():
    return MemoryObject.objects.count() == 0 and Operation.objects.count() == 0


# --- health, schema, auth -------------------------------------------------------------------------


def test_health_is_public(anon_api):
    r = anon_api.get("/api/v1/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["database"] == "ok"
    assert r.json()["broker"] in ("ok", "unavailable")


def test_schema_and_docs_are_served(anon_api):
    r = anon_api.get("/api/v1/schema", HTTP_ACCEPT="application/json")
    assert r.status_code == 200
    assert b"/api/v1/objects" in r.content
    docs = anon_api.get("/api/v1/docs")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
    assert b"cdn" not in docs.content.lower()


def test_no_token_is_401_with_www_authenticate(anon_api):
    r = anon_api.get("/api/v1/objects")
    assert_error(r, 401, "not_authenticated")
    assert r.headers["WWW-Authenticate"] == "Token"


def test_bad_token_is_401(anon_api):
    anon_api.credentials(HTTP_AUTHORIZATION="Token nope")
    r = anon_api.get("/api/v1/objects")
    assert_error(r, 401, "authentication_failed")
    assert r.headers["WWW-Authenticate"] == "Token"


def test_unknown_api_path_is_json_404(client_api):
    assert_error(client_api.get("/api/v1/nowhere"), 404, "not_found")


def test_method_not_allowed(client_api):
    assert_error(client_api.delete("/api/v1/objects"), 405, "method_not_allowed")


# --- namespaces -----------------------------------------------------------------------------------


def test_admin_creates_namespace_with_settings(admin_api):
    r = admin_api.post(
        "/api/v1/namespaces",
        {
            "name": "travel",
            "ignore_threshold": 3,
            "alert_thresholds": {"mean_usage_ratio": 0.3},
            "weights": {"similarity": 0.5, "hotness": 0.2, "utility": 0.3},
        },
        format="json",
    )
    assert r.status_code == 201
    assert r.json()["ignore_threshold"] == 3
    assert r.json()["alert_thresholds"] == {"mean_usage_ratio": 0.3}
    assert admin_api.get("/api/v1/namespaces/travel").json()["weights"]["utility"] == 0.3
    assert_error(
        admin_api.post("/api/v1/namespaces", {"name": "travel"}, format="json"),
        409,
        "namespace_exists",
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "bad name!"}, "name"),
        ({"name": "x", "ignore_threshold": 0}, "ignore_threshold"),
        ({"name": "x", "ignore_threshold": "5"}, "ignore_threshold"),
        ({"name": "x", "alert_thresholds": {"nope": 0.1}}, "alert_thresholds"),
        ({"name": "x", "weights": {"similarity": 2}}, "weights.similarity"),
        ({"name": "x", "relevance_threshold": "NaN"}, "relevance_threshold"),
        ({"name": "x", "colour": "red"}, "colour"),
    ],
)
def test_namespace_validation(admin_api, body, field):
    assert_error(
        admin_api.post("/api/v1/namespaces", body, format="json"), 400, "validation_error", field
    )
    assert not Namespace.objects.filter(name="x").exists()


def test_only_admin_creates_namespaces(client_api, operator_api):
    for api in (client_api, operator_api):
        assert_error(api.post("/api/v1/namespaces", {"name": "x"}, format="json"), 403, "forbidden")


def test_clients_see_only_their_namespaces(client_api, outsider_api, operator_api):
    assert [n["name"] for n in client_api.get("/api/v1/namespaces").json()["results"]] == [
        "support"
    ]
    assert [n["name"] for n in outsider_api.get("/api/v1/namespaces").json()["results"]] == [
        "billing"
    ]
    assert {n["name"] for n in operator_api.get("/api/v1/namespaces").json()["results"]} == {
        "support",
        "billing",
    }
    assert_error(outsider_api.get("/api/v1/namespaces/support"), 404)


# --- create ---------------------------------------------------------------------------------------


def test_create_object_with_defaults(client_api):
    r = client_api.post("/api/v1/objects", OBJ, format="json")
    assert r.status_code == 201
    body = r.json()
    assert body["confidence"] == 0.75 and body["decay_profile"] == "MEDIUM"
    assert body["salience_base"] == 0.5 and body["salience_effective"] == pytest.approx(
        0.5, abs=1e-6
    )
    assert body["created_by"] == "client-1" and body["created_by_type"] == "SYSTEM_PROCESS"
    assert body["version"] == 1 and body["pinned"] is False and body["condition_state"] is None
    assert body["aggregate"]["total_injections"] == 0 and body["aggregate"]["usage_ratio"] is None
    ops = Operation.objects.filter(target_id=body["id"])
    assert [op.op_type for op in ops] == ["OBJECT_CREATED"]
    assert ops[0].hash == body["head_hash"]


def test_create_with_client_id_actor_and_past_ts(client_api):
    oid = str(uuid.uuid4())
    ts = "2026-01-02T03:04:05.123456+00:00"
    r = client_api.post(
        "/api/v1/objects",
        {
            **OBJ,
            "id": oid,
            "actor_id": "extractor-1",
            "actor_type": "AI_AGENT",
            "ts": ts,
            "evidence_ids": ["doc-2", "doc-1", "doc-1"],
            "domain_tags": ["b", "a"],
        },
        format="json",
    )
    assert r.status_code == 201
    body = r.json()
    assert body["id"] == oid and body["created_at"] == ts
    assert body["evidence_ids"] == ["doc-1", "doc-2"]
    assert body["created_by"] == "extractor-1" and body["created_by_type"] == "AI_AGENT"


def test_create_many(client_api):
    r = client_api.post(
        "/api/v1/objects", [OBJ, {**OBJ, "epistemic_type": "OBSERVED"}], format="json"
    )
    assert r.status_code == 201
    assert [o["confidence"] for o in r.json()] == [0.75, 0.9]


def test_create_list_with_one_bad_item_writes_nothing(client_api):
    r = client_api.post("/api/v1/objects", [OBJ, {**OBJ, "confidence": 0.99}], format="json")
    assert_error(r, 400, field="1.confidence")
    assert nothing_written()


def test_create_above_1000_is_refused(client_api):
    r = client_api.post("/api/v1/objects", [OBJ] * 1001, format="json")
    assert_error(r, 400, "validation_error")
    assert nothing_written()


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"epistemic_type": "BELIEVED"}, "epistemic_type"),
        ({"epistemic_type": "DEPRECATED"}, "epistemic_type"),
        ({"confidence": 1.5}, "confidence"),
        ({"confidence": -0.1}, "confidence"),
        ({"confidence": "0.5"}, "confidence"),
        ({"confidence": "NaN"}, "confidence"),
        ({"confidence": True}, "confidence"),
        ({"confidence": 0.93}, "confidence"),  # above the ASSERTED ceiling
        ({"salience_base": 2}, "salience_base"),
        ({"decay_profile": "FOREVER"}, "decay_profile"),
        ({"condition_state": "TRUE"}, "condition_state"),  # only for CONDITIONAL
        ({"actor_type": "ROBOT"}, "actor_type"),
        ({"id": "not-a-uuid"}, "id"),
        ({"content": ""}, "content"),
        ({"domain_tags": "alice"}, "domain_tags"),
        ({"ts": "yesterday"}, "ts"),
        ({"ts": "2999-01-01T00:00:00Z"}, "ts"),
        ({"confidance": 0.5}, "confidance"),
    ],
)
def test_create_validation_errors(client_api, patch, field):
    assert_error(
        client_api.post("/api/v1/objects", {**OBJ, **patch}, format="json"), 400, field=field
    )
    assert nothing_written()


def test_malformed_json_and_nan_literal(client_api):
    for raw in ("{not json", '{"namespace": "support", "confidence": NaN}', "[1,"):
        r = client_api.post("/api/v1/objects", raw, content_type="application/json")
        assert_error(r, 400, "malformed_json")
    assert nothing_written()


def test_body_not_an_object(client_api):
    assert_error(client_api.post("/api/v1/objects", "42", content_type="application/json"), 400)


def test_oversized_body_is_413(client_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    r = client_api.post("/api/v1/objects", {**OBJ, "content": "x" * 2000}, format="json")
    assert_error(r, 413, "request_too_large")
    assert nothing_written()


def test_admin_may_create_above_type_ceiling(admin_api):
    r = admin_api.post("/api/v1/objects", {**OBJ, "confidence": 0.97}, format="json")
    assert r.status_code == 201 and r.json()["confidence"] == 0.97
    assert_error(admin_api.post("/api/v1/objects", {**OBJ, "confidence": 0.98}, format="json"), 400)


def test_duplicate_id_is_409(client_api):
    oid = str(uuid.uuid4())
    assert client_api.post("/api/v1/objects", {**OBJ, "id": oid}, format="json").status_code == 201
    assert_error(
        client_api.post("/api/v1/objects", {**OBJ, "id": oid}, format="json"), 409, "object_exists"
    )
    assert Operation.objects.count() == 1


def test_roles_and_namespaces_for_create(operator_api, outsider_api, admin_api):
    assert_error(operator_api.post("/api/v1/objects", OBJ, format="json"), 403)
    assert_error(outsider_api.post("/api/v1/objects", OBJ, format="json"), 403)
    assert_error(
        admin_api.post("/api/v1/objects", {**OBJ, "namespace": "ghost"}, format="json"),
        400,
        "unknown_namespace",
    )
    assert nothing_written()


# --- read -----------------------------------------------------------------------------------------


def test_detail_and_scope(client_api, outsider_api, operator_api):
    oid = client_api.post("/api/v1/objects", OBJ, format="json").json()["id"]
    assert client_api.get(f"/api/v1/objects/{oid}").json()["id"] == oid
    assert operator_api.get(f"/api/v1/objects/{oid}").status_code == 200
    assert_error(outsider_api.get(f"/api/v1/objects/{oid}"), 404, "not_found")
    assert_error(client_api.get(f"/api/v1/objects/{uuid.uuid4()}"), 404)
    assert_error(client_api.get("/api/v1/objects/12345"), 404)


def test_list_cursor_pagination_and_filters(client_api, outsider_api):
    created = client_api.post(
        "/api/v1/objects",
        [
            {**OBJ, "content": f"fact {i}", "epistemic_type": "OBSERVED" if i % 2 else "ASSERTED"}
            for i in range(25)
        ],
        format="json",
    ).json()
    seen, url = [], "/api/v1/objects?page_size=10"
    while url:
        page = client_api.get(url).json()
        assert len(page["results"]) <= 10
        seen += [o["id"] for o in page["results"]]
        url = page["next"]
    assert sorted(seen) == sorted(o["id"] for o in created) and len(seen) == 25
    observed = client_api.get("/api/v1/objects?epistemic_type=OBSERVED&page_size=100").json()
    assert len(observed["results"]) == 12 and observed["next"] is None
    assert client_api.get("/api/v1/objects?pinned=true").json()["results"] == []
    assert outsider_api.get("/api/v1/objects").json()["results"] == []
    assert_error(outsider_api.get("/api/v1/objects?namespace=support"), 403)
    assert_error(client_api.get("/api/v1/objects?epistemic_type=NOPE"), 400, field="epistemic_type")
    assert_error(client_api.get("/api/v1/objects?pinned=maybe"), 400, field="pinned")
    assert_error(client_api.get("/api/v1/objects?page_size=1001"), 400, field="page_size")
    assert_error(client_api.get("/api/v1/objects?cursor=%%%"), 400, field="cursor")


def test_list_query_count_is_bounded(client_api, django_assert_max_num_queries):
    client_api.post(
        "/api/v1/objects", [{**OBJ, "content": f"f{i}"} for i in range(30)], format="json"
    )
    with django_assert_max_num_queries(6):
        assert len(client_api.get("/api/v1/objects").json()["results"]) == 30


def test_operations_are_the_chain_oldest_first(client_api, admin_api):
    oid = client_api.post("/api/v1/objects", OBJ, format="json").json()["id"]
    for _ in range(3):
        client_api.post(
            f"/api/v1/objects/{oid}/signals",
            {"signal_type": "CONFIRMED", "session_id": "s"},
            format="json",
        )
    page = client_api.get(f"/api/v1/objects/{oid}/operations?page_size=4").json()
    ops = page["results"]
    assert [o["op_type"] for o in ops] == [
        "OBJECT_CREATED",
        "FEEDBACK_EVENT",
        "REINFORCE",
        "FEEDBACK_EVENT",
    ]
    assert ops[1]["prev_hash"] == ops[0]["hash"]
    rest = client_api.get(page["next"]).json()
    assert [o["op_type"] for o in rest["results"]] == ["REINFORCE", "FEEDBACK_EVENT", "REINFORCE"]
    assert rest["next"] is None


def test_operations_pages_keep_chain_order_across_equal_times(client_api):
    """Every operation of one session shares its ts: pages of 1 walk the chain in seq order,
    the old seq-only cursor still works, and a forged cursor is a 400."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    oid = client_api.post("/api/v1/objects", {**OBJ, "ts": t0.isoformat()}, format="json").json()[
        "id"
    ]
    for i in range(3):
        r = client_api.post(
            f"/api/v1/objects/{oid}/signals",
            {"signal_type": "CONFIRMED", "session_id": f"s{i}", "ts": t0.isoformat()},
            format="json",
        )
        assert r.status_code == 201
    expected = list(Operation.objects.filter(target_id=oid).order_by("seq").values_list("seq"))
    assert len(expected) == 7
    seen, url = [], f"/api/v1/objects/{oid}/operations?page_size=1"
    while url:
        page = client_api.get(url).json()
        seen += [o["seq"] for o in page["results"]]
        url = page["next"]
    assert seen == [seq for (seq,) in expected]
    from rms.api.pagination import encode_cursor

    old = client_api.get(
        f"/api/v1/objects/{oid}/operations", {"cursor": encode_cursor([expected[3][0]])}
    ).json()
    assert [o["seq"] for o in old["results"]] == [seq for (seq,) in expected[4:]]
    for forged in ([], [True], ["1"], [1, "yesterday"], [1, 5], [1, t0.isoformat(), 3]):
        r = client_api.get(f"/api/v1/objects/{oid}/operations", {"cursor": encode_cursor(forged)})
        assert_error(r, 400, field="cursor")


@pytest.mark.postgres
def test_operations_page_reads_the_index_in_order_without_sorting_the_chain(client_api):
    from django.db import connection

    oid = client_api.post("/api/v1/objects", OBJ, format="json").json()["id"]
    qs = Operation.objects.filter(target_id=oid).order_by("ts", "seq")[:21]
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # On the partitioned log (PostgreSQL): a Merge Append of each partition's copy of the index
    # (named after its columns), still in index order; no Sort node either way.
    assert "op_target_ts" in plan or "target_id_ts_seq_idx" in plan, plan
    assert not re.search(r"^\s*(->\s+)?Sort\s+\(", plan, re.MULTILINE), plan


# --- state as of ----------------------------------------------------------------------------------


def test_state_as_of(client_api, admin_api):
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    oid = client_api.post("/api/v1/objects", {**OBJ, "ts": t0.isoformat()}, format="json").json()[
        "id"
    ]
    for day in (1, 2):
        r = client_api.post(
            f"/api/v1/objects/{oid}/signals",
            {
                "signal_type": "CONFIRMED",
                "session_id": f"s{day}",
                "ts": (t0 + timedelta(days=day)).isoformat(),
            },
            format="json",
        )
        assert r.status_code == 201
    at = lambda dt: client_api.get(f"/api/v1/objects/{oid}/state", {"as_of": dt.isoformat()})  # noqa: E731
    assert_error(at(t0 - timedelta(seconds=1)), 404)
    assert at(t0).json()["confidence"] == 0.75
    assert at(t0 + timedelta(hours=36)).json()["confidence"] == pytest.approx(0.7875, abs=1e-15)
    latest = at(t0 + timedelta(days=3)).json()
    assert latest["confidence"] == client_api.get(f"/api/v1/objects/{oid}").json()["confidence"]
    assert latest["version"] == 5 and latest["reinforcement_count"] == 2
    assert_error(client_api.get(f"/api/v1/objects/{oid}/state"), 400, field="as_of")
    assert_error(
        client_api.get(f"/api/v1/objects/{oid}/state", {"as_of": "soon"}), 400, field="as_of"
    )


def test_state_as_of_counts_the_fact_operations_after_the_last_stored_state(client_api):
    """Injections and UNUSED feedback store no state: the version as of a time after them is the
    stored state's version plus those operations, the same as counting the chain."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    oid = client_api.post("/api/v1/objects", {**OBJ, "ts": t0.isoformat()}, format="json").json()[
        "id"
    ]
    for day in (1, 2, 3):
        r = client_api.post(
            "/api/v1/feedback-sessions",
            {
                "session_id": f"s{day}",
                "request_id": f"r{day}",
                "namespace_scope": ["support"],
                "context_budget": 1000,
                "tokens_used": 100,
                "ts": (t0 + timedelta(days=day)).isoformat(),
                "injections": [{"object_id": oid, "token_cost": 10}],
                "signals": [],
            },
            format="json",
        )
        assert r.status_code == 201, r.json()
    from rms import oplog

    for hours in (0, 12, 24, 36, 48, 72, 96):
        at = t0 + timedelta(hours=hours)
        body = client_api.get(f"/api/v1/objects/{oid}/state", {"as_of": at.isoformat()}).json()
        counted = Operation.objects.filter(target_id=oid, ts__lte=at).count()
        assert body["version"] == counted == oplog.version_as_of(oid, at)
    # created (1) + three sessions of INJECTION_EVENT + automatic UNUSED FEEDBACK_EVENT
    assert body["version"] == 7 and body["confidence"] == 0.75


# --- pin, unpin, transition, condition ------------------------------------------------------------


def test_pin_unpin_round_trip(client_api, admin_api):
    oid = client_api.post(
        "/api/v1/objects", {**OBJ, "epistemic_type": "OBSERVED"}, format="json"
    ).json()["id"]
    r = admin_api.post(
        f"/api/v1/objects/{oid}/pin", {"confidence": 1.0, "reason": "verified"}, format="json"
    )
    assert r.status_code == 200 and r.json()["pinned"] and r.json()["confidence"] == 1.0
    r = admin_api.post(f"/api/v1/objects/{oid}/unpin", {"reason": "stale"}, format="json")
    assert r.json()["pinned"] is False and r.json()["confidence"] == 0.97
    ops = list(Operation.objects.filter(target_id=oid).order_by("seq"))
    assert [o.op_type for o in ops][-2:] == ["PIN", "UNPIN"]
    assert (
        ops[-1].payload["confidence_before"] == 1.0 and ops[-1].payload["confidence_after"] == 0.97
    )
    assert ops[-1].payload["reason"] == "stale"


def test_pin_errors(client_api, admin_api, operator_api):
    oid = client_api.post("/api/v1/objects", OBJ, format="json").json()["id"]
    url = f"/api/v1/objects/{oid}/pin"
    assert_error(client_api.post(url, {"reason": "x"}, format="json"), 403)
    assert_error(operator_api.post(url, {"reason": "x"}, format="json"), 403)
    assert_error(
        admin_api.post(url, {"confidence": 0.95, "reason": "x"}, format="json"),
        400,
        field="confidence",
    )
    assert_error(admin_api.post(url, {"confidence": 0.5}, format="json"), 400, field="reason")
    assert_error(
        admin_api.post(f"/api/v1/objects/{oid}/unpin", {"reason": "x"}, format="json"),
        409,
        "not_pinned",
    )
    assert Operation.objects.filter(target_id=oid).count() == 1


def test_transitions_and_deprecated_is_final(client_api, admin_api):
    oid = client_api.post(
        "/api/v1/objects", {**OBJ, "epistemic_type": "UNVERIFIED"}, format="json"
    ).json()["id"]
    url = f"/api/v1/objects/{oid}/transition"
    assert_error(
        admin_api.post(url, {"to": "OBSERVED", "reason": "x"}, format="json"),
        409,
        "transition_not_allowed",
    )
    assert (
        admin_api.post(url, {"to": "ASSERTED", "reason": "checked"}, format="json").json()[
            "epistemic_type"
        ]
        == "ASSERTED"
    )
    assert (
        admin_api.post(url, {"to": "DEPRECATED", "reason": "wrong"}, format="json").json()[
            "epistemic_type"
        ]
        == "DEPRECATED"
    )
    assert_error(
        admin_api.post(url, {"to": "ASSERTED", "reason": "x"}, format="json"),
        409,
        "object_deprecated",
    )
    assert_error(
        admin_api.post(f"/api/v1/objects/{oid}/pin", {"reason": "x"}, format="json"),
        409,
        "object_deprecated",
    )
    assert_error(admin_api.post(url, {"to": "NOPE", "reason": "x"}, format="json"), 400, field="to")
    assert_error(client_api.post(url, {"to": "DEPRECATED", "reason": "x"}, format="json"), 403)
    op = (
        Operation.objects.filter(target_id=oid, op_type="EPISTEMIC_TRANSITION")
        .order_by("seq")
        .last()
    )
    assert op.payload["from"] == "ASSERTED" and op.payload["to"] == "DEPRECATED"


def test_condition_gates_reinforcement(client_api):
    oid = client_api.post(
        "/api/v1/objects", {**OBJ, "epistemic_type": "CONDITIONAL"}, format="json"
    ).json()["id"]
    sig = {"signal_type": "CONFIRMED", "session_id": "s"}
    r = client_api.post(f"/api/v1/objects/{oid}/signals", sig, format="json")
    assert r.status_code == 201 and r.json()["effect"] == "rejected"
    assert r.json()["object"]["confidence"] == 0.6
    r = client_api.post(
        f"/api/v1/objects/{oid}/condition", {"condition_state": "TRUE"}, format="json"
    )
    assert r.status_code == 200 and r.json()["condition_state"] == "TRUE"
    r = client_api.post(f"/api/v1/objects/{oid}/signals", sig, format="json")
    assert r.json()["effect"] == "reinforced" and r.json()["object"]["confidence"] == pytest.approx(
        0.66, abs=1e-15
    )
    assert_error(
        client_api.post(
            f"/api/v1/objects/{oid}/condition", {"condition_state": "MAYBE"}, format="json"
        ),
        400,
    )
    other = client_api.post("/api/v1/objects", OBJ, format="json").json()["id"]
    assert_error(
        client_api.post(
            f"/api/v1/objects/{other}/condition", {"condition_state": "TRUE"}, format="json"
        ),
        409,
        "not_conditional",
    )


def test_foreign_namespace_writes_are_404(client_api, outsider_api):
    oid = client_api.post("/api/v1/objects", OBJ, format="json").json()["id"]
    assert_error(
        outsider_api.post(
            f"/api/v1/objects/{oid}/signals",
            {"signal_type": "CONFIRMED", "session_id": "s"},
            format="json",
        ),
        404,
    )
    assert_error(
        outsider_api.post(
            f"/api/v1/objects/{oid}/condition", {"condition_state": "TRUE"}, format="json"
        ),
        404,
    )
    assert Operation.objects.filter(target_id=oid).count() == 1
