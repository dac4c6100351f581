"""Issue 15, cases 1–3, 9 and 12: hostile input is a 400 (404) in the contract's error shape, and
nothing is written. Bodies are sent as raw text: ``format="json"`` cannot spell 1e400 or a
repeated key."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver

from feedback.models import FeedbackSession, SignalRecord
from rms.api import parsers
from rms.models import MemoryObject, Operation

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 6, 1, tzinfo=UTC)
JSON = "application/json"


def row_counts() -> dict[str, int]:
    """Rows of every model of the service's apps (and so of every table a request may write)."""
    return {
        m._meta.label: m.objects.count()
        for app in ("rms", "feedback")
        for m in apps.get_app_config(app).get_models()
    }


def raw(api, path: str, text: str, method: str = "post"):
    return getattr(api, method)(path, data=text, content_type=JSON)


def assert_error(resp, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.content[:500]
    assert resp["Content-Type"].startswith(JSON)
    error = resp.json()["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    if code is not None:
        assert error["code"] == code, error
    return error


def new_object(api) -> str:
    body = {"namespace": "support", "content": "Alice prefers Python", "epistemic_type": "ASSERTED"}
    resp = api.post("/api/v1/objects", body, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()["id"]


def session_text(oid: str, rid: str = "r-1", **replace: str) -> str:
    """A valid session body as JSON text; ``replace`` puts raw JSON text at a field."""
    fields = {
        "session_id": '"conv-1"',
        "request_id": json.dumps(rid),
        "namespace_scope": '["support"]',
        "context_budget": "1000",
        "tokens_used": "100",
        "injections": f'[{{"object_id": "{oid}", "token_cost": 10}}]',
        "signals": f'[{{"object_id": "{oid}", "signal_type": "CONFIRMED", "evidence_ids": []}}]',
    }
    fields.update(replace)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


# --- case 1: numbers that overflow to infinity --------------------------------------------------


@pytest.mark.parametrize(
    "field, text",
    [
        ("context_budget", "1e400"),
        ("session_id", "1e400"),
        ("tokens_used", "-1e400"),
        ("context_budget", "NaN"),
        ("context_budget", "Infinity"),
        ("signals", '[{"object_id": "%s", "signal_type": "CONFIRMED", "evidence_ids": [1e400]}]'),
        ("injections", '[{"object_id": "%s", "token_cost": 10, "composite_score": 1e999}]'),
    ],
)
def test_non_finite_number_in_a_session_is_400(client_api, field, text):
    oid = new_object(client_api)
    before = row_counts()
    resp = raw(
        client_api,
        "/api/v1/feedback-sessions",
        session_text(oid, **{field: text.replace("%s", oid)}),
    )
    error = assert_error(resp, 400, "malformed_json")
    assert "not finite" in error["message"] or "not a JSON number" in error["message"]
    assert row_counts() == before


def test_non_finite_number_in_a_signal_or_an_object_is_400(client_api):
    oid = new_object(client_api)
    before = row_counts()
    signal = '{"signal_type": "CONFIRMED", "session_id": 1e400, "evidence_ids": [1e400]}'
    assert_error(raw(client_api, f"/api/v1/objects/{oid}/signals", signal), 400, "malformed_json")
    obj = (
        '{"namespace": "support", "content": "x", "epistemic_type": "ASSERTED", '
        '"confidence": 1e400}'
    )
    assert_error(raw(client_api, "/api/v1/objects", obj), 400, "malformed_json")
    assert_error(raw(client_api, "/api/v1/objects", f"[{obj}]"), 400, "malformed_json")
    assert row_counts() == before


def test_a_batch_item_with_a_non_finite_number_is_its_own_400(client_api):
    oid = new_object(client_api)
    before = row_counts()
    items = [
        session_text(oid, "r-1"),
        session_text(oid, "r-2", context_budget="1e400"),
        session_text(oid, "r-3", signal_type='"CONFIRMED", "signal_type": "CORRECTED"'),
        session_text(oid, "r-4"),
    ]
    resp = raw(client_api, "/api/v1/feedback-sessions/batch", "[" + ",".join(items) + "]")
    assert resp.status_code == 207, resp.content[:500]
    results = resp.json()["results"]
    assert [r["status"] for r in results] == [201, 400, 400, 201]
    assert results[1]["error"]["code"] == "malformed_json"
    assert "1e400" in results[1]["error"]["message"]
    assert "appears twice" in results[2]["error"]["message"]
    assert FeedbackSession.objects.count() == before["feedback.FeedbackSession"] + 2
    assert sorted(FeedbackSession.objects.values_list("request_id", flat=True)) == ["r-1", "r-4"]
    # The retry of the whole batch: the good items are identical retries, the bad stay 400.
    again = raw(client_api, "/api/v1/feedback-sessions/batch", "[" + ",".join(items) + "]")
    assert [r["status"] for r in again.json()["results"]] == [200, 400, 400, 200]
    assert FeedbackSession.objects.count() == before["feedback.FeedbackSession"] + 2


def test_a_batch_that_is_not_a_list_is_still_one_400(client_api):
    before = row_counts()
    resp = raw(client_api, "/api/v1/feedback-sessions/batch", '{"a": 1e400}')
    assert_error(resp, 400, "malformed_json")
    resp = raw(client_api, "/api/v1/feedback-sessions/batch", '[{"a": 1e400}, ]')
    assert_error(resp, 400, "malformed_json")
    assert row_counts() == before


# --- case 2: deep nesting ----------------------------------------------------------------------


def api_routes() -> list[str]:
    """Every route of the API, its path parameters filled with a well-formed id."""
    out = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                out.append(prefix + str(p.pattern))

    walk(get_resolver().url_patterns, "")
    # schema and docs take no body and answer in their own media types
    skip = ("api/v1/schema", "api/v1/docs")
    return [r for r in out if r.startswith("api/v1/") and "^" not in r and r not in skip]


def fill(route: str, oid: str) -> str:
    for name in ("object_id", "relationship_id", "session_id", "task_id", "id", "delivery_id"):
        route = route.replace(f"<str:{name}>", oid).replace(f"<uuid:{name}>", oid)
    return "/" + route.replace("<str:name>", "support").replace("<str:kind>", "sessions")


@pytest.mark.parametrize("depth", [parsers.MAX_DEPTH + 1, 1000, 100_000])
def test_deep_nesting_is_400_on_every_endpoint(admin_api, client_api, depth):
    oid = new_object(client_api)
    routes = api_routes()
    assert len(routes) >= 25
    bodies = ["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth]
    before = row_counts()
    read_the_body = set()
    for route in routes:
        for method in ("post", "put", "patch"):
            for body in bodies:
                resp = raw(admin_api, fill(route, oid), body, method)
                assert resp.status_code in (400, 404, 405), (route, method, resp.content[:300])
                error = assert_error(resp, resp.status_code)
                if resp.status_code == 400:
                    assert error["code"] == "malformed_json", (route, error)
                    assert "nested" in error["message"]
                    read_the_body.add((method, route))
    assert {
        "namespaces",
        "objects",
        "objects/<str:object_id>/signals",
        "objects/<str:object_id>/pin",
        "objects/<str:object_id>/unpin",
        "objects/<str:object_id>/transition",
        "objects/<str:object_id>/condition",
        "relationships",
        "relationships/<str:relationship_id>/evidence",
        "feedback-sessions",
        "feedback-sessions/batch",
        "rank",
        "detect",
        "tasks",
    } <= {route.removeprefix("api/v1/") for method, route in read_the_body if method == "post"}
    assert row_counts() == before


def test_deep_nesting_inside_a_valid_session_and_a_cursor_is_400(client_api):
    oid = new_object(client_api)
    before = row_counts()
    deep = "[" * 500 + "]" * 500
    body = session_text(oid, context_tags=deep)
    assert_error(raw(client_api, "/api/v1/feedback-sessions", body), 400, "malformed_json")
    batch = "[" + session_text(oid, "r-9", context_tags=deep) + "]"
    assert_error(raw(client_api, "/api/v1/feedback-sessions/batch", batch), 400, "malformed_json")
    import base64

    cursor = base64.urlsafe_b64encode(deep.encode()).decode()
    resp = client_api.get(f"/api/v1/objects?cursor={cursor}")
    assert_error(resp, 400, "validation_error")
    assert row_counts() == before


def test_nesting_up_to_the_limit_is_parsed():
    text = "[" * parsers.MAX_DEPTH + "]" * parsers.MAX_DEPTH
    assert parsers.nesting_depth(text) == parsers.MAX_DEPTH
    assert parsers.loads('{"a": "[[[[ \\" {{{{", "b": [[1], {"c": [2]}]}') == {
        "a": '[[[[ " {{{{',
        "b": [[1], {"c": [2]}],
    }
    assert parsers.nesting_depth('{"a": "[[[[ \\" {{{{", "b": [[1], {"c": [2]}]}' + " " * 64) == 4


# --- case 3: time query parameters -------------------------------------------------------------

BAD_TIMES = [
    ("2026-06-01T00:00:00+16:00", "less than 16 hours"),
    ("2026-06-01T00:00:00-16:00", "less than 16 hours"),
    ("2026-06-01T00:00:00+23:59", "less than 16 hours"),
    ("9999-12-31T23:00:00-05:00", "out of range"),
    ("0001-01-01T00:30:00+01:00", "out of range"),
    ("2026-13-01T00:00:00Z", "ISO 8601"),
    ("not a time", "ISO 8601"),
]


@pytest.mark.parametrize("value, reason", BAD_TIMES)
def test_bad_time_query_parameters_are_400(client_api, value, reason):
    oid = new_object(client_api)
    rel = client_api.post(
        "/api/v1/relationships",
        {"source": oid, "target": new_object(client_api), "relation": "r",
         "extraction_context": "INFERRED"},
        format="json",
    ).json()  # fmt: skip
    before = row_counts()
    calls = [
        (f"/api/v1/objects/{oid}/state", "as_of"),
        (f"/api/v1/relationships/{rel['id']}", "as_of"),
        ("/api/v1/metrics?namespace=support", "since"),
        ("/api/v1/metrics?namespace=support", "until"),
    ]
    for path, name in calls:
        sep = "&" if "?" in path else "?"
        resp = client_api.get(f"{path}{sep}{name}={value.replace('+', '%2B')}")
        error = assert_error(resp, 400, "validation_error")
        assert reason in error["fields"][name][0], (path, error)
    assert row_counts() == before


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-06-01"])
def test_extreme_but_valid_time_query_parameters_are_answered(client_api, value):
    oid = new_object(client_api)
    assert client_api.get(f"/api/v1/objects/{oid}/state?as_of={value}").status_code in (200, 404)
    for name in ("since", "until"):
        resp = client_api.get(f"/api/v1/metrics?namespace=support&{name}={value}")
        assert resp.status_code == 200, resp.content


def test_a_body_time_with_a_16_hour_offset_is_400(client_api):
    oid = new_object(client_api)
    before = row_counts()
    body = {"signal_type": "CONFIRMED", "session_id": "s", "ts": "2026-06-01T00:00:00+16:00"}
    resp = client_api.post(f"/api/v1/objects/{oid}/signals", body, format="json")
    assert "less than 16 hours" in assert_error(resp, 400, "validation_error")["fields"]["ts"][0]
    session = session_text(oid, ts='"9999-12-31T23:00:00-05:00"')
    assert_error(raw(client_api, "/api/v1/feedback-sessions", session), 400, "validation_error")
    assert row_counts() == before


# --- case 9: duplicate keys, text fields, request_id --------------------------------------------


def test_duplicate_keys_are_refused_at_parse_time(client_api):
    oid = new_object(client_api)
    before = row_counts()
    body = '{"signal_type": "CONFIRMED", "signal_type": "CORRECTED", "session_id": "s"}'
    error = assert_error(raw(client_api, f"/api/v1/objects/{oid}/signals", body), 400)
    assert error["code"] == "malformed_json" and "signal_type" in error["message"]
    nested = session_text(
        oid, signals=f'[{{"object_id": "{oid}", "object_id": "{oid}", "signal_type": "CONFIRMED"}}]'
    )
    assert_error(raw(client_api, "/api/v1/feedback-sessions", nested), 400, "malformed_json")
    assert row_counts() == before
    assert MemoryObject.objects.get(pk=oid).reinforcement_count == 0


@pytest.mark.parametrize(
    "path_field, value",
    [
        ("evidence_ids", [12]),
        ("session_id", 7),
        ("actor_id", 1.5),
        ("session_id", True),
    ],
)
def test_text_fields_take_strings_only(client_api, path_field, value):
    oid = new_object(client_api)
    before = row_counts()
    body = {"signal_type": "CONFIRMED", "session_id": "s", path_field: value}
    resp = client_api.post(f"/api/v1/objects/{oid}/signals", body, format="json")
    error = assert_error(resp, 400, "validation_error")
    assert any(k.startswith(path_field) for k in error["fields"]), error
    assert row_counts() == before


def test_text_and_id_fields_of_sessions_and_objects_take_strings_only(client_api):
    oid = new_object(client_api)
    before = row_counts()
    for field, text in [
        ("session_id", "12"),
        ("request_id", "12"),
        ("namespace_scope", "[12]"),
        ("context_tags", "[1.5]"),
        ("injections", '[{"object_id": 5, "token_cost": 10}]'),
        ("signals", f'[{{"object_id": "{oid}", "signal_type": "CONFIRMED", "actor_id": 3}}]'),
        ("detect", '"true"'),
    ]:
        resp = raw(client_api, "/api/v1/feedback-sessions", session_text(oid, **{field: text}))
        assert_error(resp, 400, "validation_error")
    resp = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": 42, "epistemic_type": "ASSERTED"},
        format="json",
    )
    assert "content" in assert_error(resp, 400, "validation_error")["fields"]
    resp = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "x", "epistemic_type": "ASSERTED", "id": 1},
        format="json",
    )
    assert "id" in assert_error(resp, 400, "validation_error")["fields"]
    assert row_counts() == before


def test_a_signal_request_id_must_be_a_uuid(client_api):
    oid = new_object(client_api)
    before = row_counts()
    body = {"signal_type": "CONFIRMED", "session_id": "s", "request_id": "r-1"}
    resp = client_api.post(f"/api/v1/objects/{oid}/signals", body, format="json")
    error = assert_error(resp, 400, "validation_error")
    assert error["fields"]["request_id"] == ["Must be a valid UUID."]
    assert row_counts() == before
    body["request_id"] = str(uuid.uuid4())
    assert client_api.post(f"/api/v1/objects/{oid}/signals", body, format="json").status_code == 201
    assert SignalRecord.objects.count() == before["feedback.SignalRecord"] + 1
    assert Operation.objects.count() > before["rms.Operation"]


# --- case 12: unknown paths --------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "path", ["/api/v1/nope", "/api/v1/nope/", "/api/v1/objects/", "/api/v2/objects", "/api/"]
)
def test_unknown_api_paths_are_json_404(client_api, settings, debug, path):
    settings.DEBUG = debug
    for method in ("get", "post", "delete"):
        resp = getattr(client_api, method)(path)
        assert_error(resp, 404, "not_found")
    assert_error(client_api.get(path, HTTP_AUTHORIZATION=""), 404, "not_found")


def test_dashboard_paths_keep_their_html_404(client_api):
    resp = client_api.get("/no-such-page/")
    assert resp.status_code == 404
    assert not resp["Content-Type"].startswith(JSON)


# --- NUL characters (no text column takes one; PostgreSQL refuses them outright) ---------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/objects?namespace=%00",
        "/api/v1/metrics?namespace=sup%00port",
        "/api/v1/export/sessions.csv?namespace=%00",
        "/api/v1/tasks?kind=%00",
        "/api/v1/objects?epistemic_type=ASSERTED&x%00=1",
    ],
)
def test_a_nul_in_a_query_parameter_is_400(operator_api, path):
    before = row_counts()
    assert_error(operator_api.get(path), 400, "validation_error")
    assert row_counts() == before


@pytest.mark.parametrize("path", ["/api/v1/namespaces/%00", "/api/v1/namespaces/sup%00port"])
def test_a_nul_in_the_path_is_404(operator_api, path):
    assert_error(operator_api.get(path), 404, "not_found")


def test_a_nul_in_a_dashboard_query_is_a_plain_400(client):
    resp = client.get("/accounts/login/?next=%00")
    assert resp.status_code == 400
