"""The OpenAPI document: valid, warning-free, and exact — real answers of every
operation, successes and the main errors, validate against it with openapi-core.

Every operation the document lists must appear in ``EXCHANGES`` with a success answer, so an
endpoint added without a matching response schema (or without a call here) fails
``test_every_operation_answers_as_documented``.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from openapi_core import Config, OpenAPI
from openapi_core.contrib.django import DjangoOpenAPIRequest, DjangoOpenAPIResponse
from openapi_core.testing import MockRequest

from tests.factories import make_client, make_namespace

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
METHODS = ("get", "post", "put", "patch", "delete")


def fetch_schema(api) -> dict:
    resp = api.get("/api/v1/schema?format=json")
    assert resp.status_code == 200, resp.content
    return json.loads(resp.content)


def operations(schema: dict) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in METHODS
        if method in item
    }


def test_schema_generation_is_valid_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert "openapi: 3." in out.read_text()


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


@pytest.mark.django_db
def test_every_answer_has_a_typed_body_and_errors_share_one_schema(anon_api):
    """No untyped ``object`` answer; every 4xx/5xx is the shared Error component (but health's
    503, which reports the dependencies); every authenticated operation lists 401, 403, 503."""
    schema = fetch_schema(anon_api)
    for path, item in schema["paths"].items():
        for method in METHODS:
            if method not in item:
                continue
            op = item[method]
            where = f"{method.upper()} {path}"
            for status, response in op["responses"].items():
                content = response.get("content")
                if str(status) == "204":
                    assert not content, f"{where} 204 documents a body"
                    continue
                assert content, f"{where} {status}: no body documented"
                for media, body in content.items():
                    node = _resolve(schema, body["schema"])
                    if int(status) >= 400 and path != "/api/v1/health":  # health: its own body
                        assert body["schema"] == {"$ref": "#/components/schemas/Error"}, where
                        assert media == "application/json", where
                    elif media == "text/csv":
                        assert node == {"type": "string"}, where
                    else:
                        typed = "properties" in node or "oneOf" in node or "items" in node
                        assert typed, f"{where} {status}: untyped {node}"
            if any(op.get("security", [])):  # [{}] is "no authentication"
                assert {"401", "403", "503"} <= set(op["responses"]), where
            if "{" in path:
                assert "404" in op["responses"], where
            if "requestBody" in op:
                assert {"400", "413"} <= set(op["responses"]), where
    error = schema["components"]["schemas"]["Error"]
    detail = _resolve(schema, error["properties"]["error"])
    assert set(detail["properties"]) == {"code", "message", "fields"}
    assert set(detail["required"]) == {"code", "message"}


@pytest.mark.django_db
def test_enums_and_parameters_are_declared(anon_api):
    schema = fetch_schema(anon_api)
    comps = schema["components"]["schemas"]
    assert set(comps["TaskKindEnum"]["enum"]) >= {
        "ignored_sweep",
        "rebuild_aggregates",
        "verify_replay",
        "verify_chain",
        "stability_simulation",
        "precision_simulation",
        "benchmark_suite",
    }
    assert "CONFIRMED" in comps["SignalTypeEnum"]["enum"]
    assert "DEPRECATED" in comps["EpistemicTypeEnum"]["enum"]

    def params(path, method="get"):
        return {p["name"]: p for p in schema["paths"][path][method].get("parameters", [])}

    objects = params("/api/v1/objects")
    assert {"namespace", "epistemic_type", "pinned", "cursor", "page_size"} <= set(objects)
    assert objects["page_size"]["schema"]["maximum"] == 1000
    assert params("/api/v1/objects/{object_id}/state")["as_of"]["required"] is True
    assert params("/api/v1/objects/{object_id}/state")["as_of"]["schema"]["format"] == "date-time"
    assert {"namespace", "since", "until"} <= set(params("/api/v1/metrics"))
    assert params("/api/v1/graph/expand")["seed"]["schema"]["type"] == "array"
    export = params("/api/v1/export/{kind}.csv")
    assert sorted(export["kind"]["schema"]["enum"]) == ["aggregates", "sessions"]
    batch = schema["paths"]["/api/v1/feedback-sessions/batch"]["post"]["responses"]
    assert set(batch) >= {"207", "400"}
    item = _resolve(schema, comps["BatchAnswer"]["properties"]["results"]["items"])
    assert sorted(_resolve(schema, item["properties"]["status"])["enum"]) == [
        200,
        201,
        400,
        403,
        409,
    ]


# --- real answers against the document -----------------------------------------------------------


class TemplateRequest(DjangoOpenAPIRequest):
    """openapi-core's Django request, matched by our path template: its own route parsing
    drops the ``.csv`` after ``<str:kind>``."""

    def __init__(self, request, template: str, body: bytes = b"") -> None:
        super().__init__(request)
        self.template = template
        self.raw_body = body

    @property
    def body(self) -> bytes:
        # The strict parser read the stream: Django's request.body is no longer available.
        return self.raw_body

    @property
    def path_pattern(self) -> str:
        return self.template


class Recorder:
    """Sends calls through the test client, validates each answer with openapi-core and notes
    which (method, path template, status) it saw."""

    def __init__(self, spec: dict, tokens: dict[str, str]) -> None:
        csv_text = {"text/csv": lambda data, **_: data.decode()}
        self.openapi = OpenAPI.from_dict(
            spec, config=Config(extra_media_type_deserializers=csv_text)
        )
        self.tokens = tokens
        self.seen: set[tuple[str, str, int]] = set()

    def __call__(self, role, method, template, status, *, body=None, query="", raw=None, **path):
        from rest_framework.test import APIClient

        api = APIClient()
        if role is not None:
            api.credentials(HTTP_AUTHORIZATION=f"Token {self.tokens[role]}")
        url = template.format(**path) + (f"?{query}" if query else "")
        if raw is not None:
            resp = getattr(api, method.lower())(url, raw[1], content_type=raw[0])
        elif body is None:
            resp = getattr(api, method.lower())(url)
        else:
            resp = getattr(api, method.lower())(url, body, format="json")
        assert resp.status_code == status, (method, url, resp.status_code, resp.content[:500])
        # The answer is matched to its operation by method and path alone (an error's request
        # may be unreadable on purpose: too large, not JSON); a success's request is valid too
        # (a 207 batch may hold invalid items on purpose).
        where = MockRequest("http://testserver", method, template.format(**path))
        self.openapi.validate_response(where, DjangoOpenAPIResponse(resp))
        if status in (200, 201, 202):
            sent = b"" if body is None else json.dumps(body).encode()
            if raw is not None:
                sent = raw[1].encode() if isinstance(raw[1], str) else raw[1]
            self.openapi.validate_request(TemplateRequest(resp.wsgi_request, template, sent))
        self.seen.add((method, template, status))
        if status == 204:
            return None
        return resp if resp.get("Content-Type", "").startswith("text/csv") else resp.json()


@pytest.mark.django_db
def test_operations_are_tagged_by_resource(anon_api):
    schema = fetch_schema(anon_api)
    tags = {}
    for path, item in schema["paths"].items():
        for method in METHODS:
            if method in item:
                resource = path.removeprefix("/api/v1/").split("/")[0]
                assert item[method]["tags"] == [resource], (method, path)
                tags[resource] = True
    assert {"objects", "feedback-sessions", "changes", "webhooks", "graph"} <= set(tags)


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def _bounded_by_int32(schema: dict, components: dict) -> bool:
    """Whether a request schema has a number whose bound is the 32-bit maximum, which example
    generators otherwise show as the value."""
    seen: set[str] = set()

    def walk(node) -> bool:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref:
                name = ref.rsplit("/", 1)[1]
                if name in seen:
                    return False
                seen.add(name)
                return walk(components[name])
            if node.get("maximum") == 2_147_483_647:
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    return walk(schema)


@pytest.mark.django_db
def test_request_bodies_bounded_by_the_int32_maximum_carry_real_examples(anon_api):
    schema = fetch_schema(anon_api)
    components = schema["components"]["schemas"]
    checked = []
    for path, item in schema["paths"].items():
        for method in METHODS:
            body = item.get(method, {}).get("requestBody", {}).get("content", {})
            media = body.get("application/json")
            if not media or not _bounded_by_int32(media["schema"], components):
                continue
            checked.append((method, path))
            examples = media.get("examples")
            assert examples, (method, path)
            for example in examples.values():
                numbers = list(_numbers(example["value"]))
                assert numbers and 2_147_483_647 not in numbers, (method, path)
    assert ("post", "/api/v1/feedback-sessions") in checked


@pytest.fixture
def recorder(anon_api, monkeypatch):
    from taskruns import runs

    monkeypatch.setattr(runs, "enqueue", lambda run: None)  # no worker in this test
    make_namespace("support")
    make_namespace("billing")
    tokens = {
        "admin": make_client("admin-1", "admin")[1],
        "operator": make_client("operator-1", "operator")[1],
        "client": make_client("client-1", "client", ["support"])[1],
        "outsider": make_client("outsider-1", "client", ["billing"])[1],
    }
    return Recorder(fetch_schema(anon_api), tokens)


def session_body(request_id: str, objects: list[str], **kw) -> dict:
    return {
        "session_id": f"conv-{request_id}",
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 100,
        "injections": [
            {"object_id": oid, "token_cost": 40, "rank_position": i + 1, "composite_score": 0.5}
            for i, oid in enumerate(objects)
        ],
        "signals": [{"object_id": objects[0], "signal_type": "REFERENCED"}],
        **kw,
    }


@pytest.mark.django_db
def test_every_operation_answers_as_documented(recorder, anon_api):
    call = recorder
    # health, namespaces
    call(None, "GET", "/api/v1/health", 200)
    call(None, "GET", "/api/v1/namespaces", 401)
    call("client", "GET", "/api/v1/namespaces", 200)
    call("admin", "POST", "/api/v1/namespaces", 201, body={"name": "ops", "weights": {}})
    call("admin", "POST", "/api/v1/namespaces", 409, body={"name": "ops"})
    call("admin", "POST", "/api/v1/namespaces", 400, body={"name": "no spaces"})
    call("client", "POST", "/api/v1/namespaces", 403, body={"name": "mine"})
    call("admin", "POST", "/api/v1/namespaces", 415, raw=("text/plain", "name=x"))
    call("operator", "GET", "/api/v1/namespaces/{name}", 200, name="support")
    call("client", "GET", "/api/v1/namespaces/{name}", 404, name="billing")
    call("admin", "PATCH", "/api/v1/namespaces/{name}", 200, body={"retention_days": 400},
         name="support")  # fmt: skip
    call("admin", "PATCH", "/api/v1/namespaces/{name}", 400, body={"retention_days": -1},
         name="support")  # fmt: skip
    call("client", "PATCH", "/api/v1/namespaces/{name}", 403, body={"retention_days": 9},
         name="support")  # fmt: skip

    # objects
    obj = {"namespace": "support", "content": "Alice prefers Python", "epistemic_type": "ASSERTED"}
    a = call("client", "POST", "/api/v1/objects", 201, body={**obj, "ts": T0.isoformat()})["id"]
    b, c = (
        o["id"]
        for o in call("client", "POST", "/api/v1/objects", 201, body=[{**obj, "content": "B"}] * 2)
    )
    call("client", "POST", "/api/v1/objects", 400, body={**obj, "confidence": 2})
    call("client", "POST", "/api/v1/objects", 400, raw=("application/json", "{not json"))
    call("client", "POST", "/api/v1/objects", 409, body={**obj, "id": a})
    call("outsider", "POST", "/api/v1/objects", 403, body=obj)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        call("client", "POST", "/api/v1/objects", 413, body={**obj, "content": "x" * 200})
    page = call("client", "GET", "/api/v1/objects", 200, query="namespace=support&page_size=1")
    assert page["next"] is not None and len(page["results"]) == 1
    call("client", "GET", "/api/v1/objects", 200, query="epistemic_type=ASSERTED&pinned=false")
    call("client", "GET", "/api/v1/objects", 400, query="pinned=maybe")
    filtered = "confidence_min=0.1&usage_ratio_max=1&in_alert=false&q=Alice&sort=-confidence"
    call("client", "GET", "/api/v1/objects", 200, query=filtered)
    call("client", "GET", "/api/v1/objects", 400, query="sort=nope")
    call("client", "GET", "/api/v1/objects", 403, query="namespace=billing")
    call("client", "GET", "/api/v1/objects/{object_id}", 200, object_id=a)
    call("outsider", "GET", "/api/v1/objects/{object_id}", 404, object_id=a)
    call("client", "GET", "/api/v1/objects/{object_id}", 404, object_id="not-a-uuid")
    state = "/api/v1/objects/{object_id}/state"
    call(
        "client", "GET", state, 200, object_id=a, query=f"as_of={T0 + timedelta(minutes=1):%FT%TZ}"
    )
    call("client", "GET", state, 400, object_id=a)
    call("client", "GET", state, 404, object_id=a, query="as_of=2020-01-01T00:00:00Z")
    ops = "/api/v1/objects/{object_id}/operations"
    call("client", "GET", ops, 200, object_id=a, query="page_size=1")
    call("client", "GET", ops, 400, object_id=a, query="cursor=%%%")

    # signals
    signals = "/api/v1/objects/{object_id}/signals"
    rid = str(uuid.uuid4())
    sig = {"signal_type": "CONFIRMED", "session_id": "s-1", "request_id": rid}
    call("client", "POST", signals, 201, object_id=a, body=sig)
    call("client", "POST", signals, 200, object_id=a, body=sig)
    call("client", "POST", signals, 409, object_id=a, body={**sig, "signal_type": "CORRECTED"})
    call("client", "POST", signals, 400, object_id=a, body={"signal_type": "NOPE"})
    call("operator", "POST", signals, 403, object_id=a, body=sig)
    explained = "/api/v1/objects/{object_id}/explain"
    call("client", "GET", explained, 200, object_id=a)
    call("client", "GET", explained, 404, object_id=a, query="as_of=2020-01-01T00:00:00Z")
    call("client", "GET", explained, 400, object_id=a, query="as_of=yesterday")
    unknown = {**sig, "request_id": str(uuid.uuid4())}
    call("client", "POST", signals, 404, object_id=str(uuid.uuid4()), body=unknown)

    # relationships and the graph
    rel = {"source": a, "target": b, "relation": "supports", "extraction_context": "EXPLICIT"}
    r = call("client", "POST", "/api/v1/relationships", 201, body=rel)["id"]
    call("client", "POST", "/api/v1/relationships", 400, body={**rel, "source": str(uuid.uuid4())})
    detail = "/api/v1/relationships/{relationship_id}"
    call("client", "GET", detail, 200, relationship_id=r)
    call(
        "client",
        "GET",
        detail,
        200,
        relationship_id=r,
        query=f"as_of={datetime.now(UTC) + timedelta(seconds=5):%FT%TZ}",
    )
    call("client", "GET", detail, 400, relationship_id=r, query="as_of=yesterday")
    call("outsider", "GET", detail, 404, relationship_id=r)
    evidence = "/api/v1/relationships/{relationship_id}/evidence"
    ev = {"kind": "corroborate", "provenance": "user"}
    call("client", "POST", evidence, 200, relationship_id=r, body=ev)
    call("client", "POST", evidence, 400, relationship_id=r, body={"kind": "maybe"})
    call("client", "GET", "/api/v1/objects/{object_id}/relationships", 200, object_id=a)
    expanded = call("client", "GET", "/api/v1/graph/expand", 200, query=f"seed={a}:1.0")
    assert [x["object_id"] for x in expanded["results"]] == [b]
    call("client", "GET", "/api/v1/graph/expand", 400)
    seeds = {"seeds": [{"object_id": a, "score": 1.0}]}
    posted = call("client", "POST", "/api/v1/graph/expand", 200, body=seeds)
    assert [x["object_id"] for x in posted["results"]] == [b]
    call("client", "POST", "/api/v1/graph/expand", 400, body={"seeds": []})
    call("client", "GET", "/api/v1/calibration", 200, query="namespace=support")
    call("client", "GET", "/api/v1/calibration", 400)
    call("client", "GET", "/api/v1/calibration", 403, query="namespace=billing")

    # sessions
    first = call(
        "client", "POST", "/api/v1/feedback-sessions", 201, body=session_body("r1", [a, b])
    )
    call("client", "POST", "/api/v1/feedback-sessions", 200, body=session_body("r1", [a, b]))
    call("client", "POST", "/api/v1/feedback-sessions", 409, body=session_body("r1", [b]))
    call("client", "POST", "/api/v1/feedback-sessions", 400, body={"session_id": "x"})
    batch = call(
        "client",
        "POST",
        "/api/v1/feedback-sessions/batch",
        207,
        body=[
            session_body("r2", [a]),
            session_body("r1", [a, b]),
            session_body("r1", [c]),
            {"request_id": "bad"},
        ],
    )
    assert [x["status"] for x in batch["results"]] == [201, 200, 409, 400]
    call("client", "POST", "/api/v1/feedback-sessions/batch", 400, body={"not": "a list"})
    detail = "/api/v1/feedback-sessions/{session_id}"
    call("client", "GET", detail, 200, session_id=first["id"])
    call("outsider", "GET", detail, 404, session_id=first["id"])

    # metrics, review queue, rank, detect, export
    call("client", "GET", "/api/v1/metrics", 200, query="namespace=support")
    call("client", "GET", "/api/v1/retrieval-quality", 200, query="namespace=support")
    call("client", "GET", "/api/v1/retrieval-quality", 403, query="namespace=billing")
    call(
        "client",
        "GET",
        "/api/v1/metrics",
        200,
        query="namespace=support&since=2026-01-01T00:00:00Z",
    )
    call(
        "client",
        "GET",
        "/api/v1/metrics",
        400,
        query="namespace=support&since=2027-01-01&until=2026-01-01",
    )
    call("operator", "GET", "/api/v1/metrics", 404, query="namespace=nowhere")
    call("operator", "GET", "/api/v1/review-queue", 200, query="namespace=support")
    call("client", "GET", "/api/v1/review-queue", 403, query="namespace=support")
    rank = {"namespace": "support", "candidates": [{"object_id": a, "similarity": 0.9}]}
    call("client", "POST", "/api/v1/rank", 200, body=rank)
    call("operator", "POST", "/api/v1/rank", 400, body={**rank, "namespace": "nowhere"})
    call("client", "POST", "/api/v1/rank", 403, body={**rank, "namespace": "billing"})
    sup = "/api/v1/suppressed"
    call("client", "GET", sup, 200, query="namespace=support&as_of=2030-01-01T00:00:00Z")
    call("client", "GET", sup, 400, query="namespace=support&k=0")
    call("client", "GET", sup, 403, query="namespace=billing")
    state = call(
        "client", "GET", "/api/v1/ranking-state", 200, query="namespace=support&page_size=1"
    )
    call(
        "client",
        "GET",
        "/api/v1/ranking-state",
        200,
        query=f"namespace=support&cursor={state['next_cursor']}",
    )
    call("client", "GET", "/api/v1/ranking-state", 400, query="namespace=support&cursor=x")
    call("operator", "GET", "/api/v1/ranking-state", 404, query="namespace=nowhere")
    call("client", "GET", "/api/v1/ranking-state", 403, query="namespace=billing")
    det = {"response_text": "Alice prefers Python for work", "object_ids": [a, b]}
    call("client", "POST", "/api/v1/detect", 200, body=det)
    call("client", "POST", "/api/v1/detect", 400, body={**det, "object_ids": []})
    export = "/api/v1/export/{kind}.csv"
    csv = call("client", "GET", export, 200, kind="sessions", query="namespace=support")
    assert b"".join(csv.streaming_content).decode().startswith("id,session_id,")
    call("operator", "GET", export, 200, kind="aggregates", query="namespace=support")
    call("client", "GET", export, 404, kind="nothing", query="namespace=support")
    call("client", "GET", export, 403, kind="sessions", query="namespace=billing")

    # changes to objects
    obj_path = "/api/v1/objects/{object_id}/"
    cond = {**obj, "epistemic_type": "CONDITIONAL"}
    d = call("client", "POST", "/api/v1/objects", 201, body=cond)["id"]
    call(
        "client", "POST", obj_path + "condition", 200, object_id=d, body={"condition_state": "TRUE"}
    )
    call("client", "POST", obj_path + "condition", 400, object_id=d, body={"condition_state": "X"})
    call("admin", "POST", obj_path + "pin", 200, object_id=a, body={"reason": "checked"})
    call("client", "POST", obj_path + "pin", 403, object_id=a, body={"reason": "checked"})
    call("admin", "POST", obj_path + "unpin", 200, object_id=a, body={"reason": "undo"})
    call("admin", "POST", obj_path + "unpin", 400, object_id=a, body={})
    deprecate = {"to": "DEPRECATED", "reason": "wrong"}
    call("admin", "POST", obj_path + "transition", 200, object_id=c, body=deprecate)
    call("admin", "POST", obj_path + "transition", 409, object_id=c, body=deprecate)
    call("admin", "POST", obj_path + "transition", 404, object_id=str(uuid.uuid4()), body=deprecate)

    # tasks
    task = call("operator", "POST", "/api/v1/tasks", 202, body={"kind": "verify_chain"})
    call("operator", "POST", "/api/v1/tasks", 400, body={"kind": "nope"})
    call("operator", "POST", "/api/v1/tasks", 403, body={"kind": "ignored_sweep"})
    call("client", "POST", "/api/v1/tasks", 403, body={"kind": "verify_chain"})
    call("operator", "GET", "/api/v1/tasks", 200, query="kind=verify_chain&state=queued")
    call("operator", "GET", "/api/v1/tasks", 400, query="state=lost")
    call("operator", "GET", "/api/v1/tasks/{task_id}", 200, task_id=task["id"])
    call("operator", "GET", "/api/v1/tasks/{task_id}", 404, task_id=str(uuid.uuid4()))
    call("client", "GET", "/api/v1/tasks/{task_id}", 403, task_id=task["id"])

    # the closed loop: change feed, alerts, webhooks
    call("client", "GET", "/api/v1/changes", 200, query="limit=5&types=object.created")
    call("client", "GET", "/api/v1/changes", 400, query="after=nope")
    call("outsider", "GET", "/api/v1/changes", 403, query="namespace=support")
    call("operator", "GET", "/api/v1/alerts", 200, query="state=open")
    call("operator", "GET", "/api/v1/alerts", 200, query="metric=mean_usage_ratio")
    call("operator", "GET", "/api/v1/alerts", 400, query="state=closed")
    with override_settings(RMS_WEBHOOKS_ALLOW_PRIVATE=True):
        hook = call(
            "admin",
            "POST",
            "/api/v1/webhooks",
            201,
            body={"url": "http://127.0.0.1:9/hook", "event_types": ["object.deprecated"]},
        )
    call("admin", "POST", "/api/v1/webhooks", 400, body={"url": "http://10.0.0.1/x"})
    call("operator", "GET", "/api/v1/webhooks", 403)
    call("admin", "GET", "/api/v1/webhooks", 200)
    one = "/api/v1/webhooks/{webhook_id}"
    call("admin", "GET", one, 200, webhook_id=hook["id"])
    call("admin", "GET", one, 404, webhook_id=str(uuid.uuid4()))
    call("admin", "PATCH", one, 200, webhook_id=hook["id"], body={"description": "store"})
    call("admin", "PATCH", one, 400, webhook_id=hook["id"], body={"state": "asleep"})
    call("admin", "POST", one + "/rotate-secret", 200, webhook_id=hook["id"])
    test = call("admin", "POST", one + "/test", 202, webhook_id=hook["id"])
    call("admin", "GET", one + "/deliveries", 200, webhook_id=hook["id"], query="state=pending")
    call("admin", "GET", one + "/deliveries", 400, webhook_id=hook["id"], query="state=lost")
    retry = one + "/deliveries/{delivery_id}/retry"
    call("admin", "POST", retry, 202, webhook_id=hook["id"], delivery_id=test["id"])
    call("admin", "POST", retry, 404, webhook_id=hook["id"], delivery_id=str(uuid.uuid4()))
    call("admin", "PATCH", one, 200, webhook_id=hook["id"], body={"state": "disabled"})
    call("admin", "POST", one + "/test", 409, webhook_id=hook["id"])
    call("admin", "DELETE", one, 204, webhook_id=hook["id"])

    # erasures
    erase = {"subject": {"kind": "object", "id": d}, "namespace": "support", "reason": "Art. 17"}
    erasure = call("admin", "POST", "/api/v1/erasures", 202, body=erase)
    call("admin", "POST", "/api/v1/erasures", 400, body={**erase, "subject": {"kind": "planet"}})
    call("operator", "POST", "/api/v1/erasures", 403, body=erase)
    call("admin", "POST", "/api/v1/erasures", 404, body={**erase, "namespace": "nowhere"})
    receipt = "/api/v1/erasures/{erasure_id}"
    call("admin", "GET", receipt, 200, erasure_id=erasure["id"])
    call("admin", "GET", receipt, 404, erasure_id=str(uuid.uuid4()))

    # OTLP trace export (JSON encoding; the protobuf one is tested in tests/otlp)
    otlp = "/api/v1/otlp/v1/traces"
    call("client", "POST", otlp, 200, raw=("application/json", '{"resourceSpans": []}'))
    call("client", "POST", otlp, 400, raw=("application/json", '{"resourceSpans": 5}'))
    call("operator", "POST", otlp, 403, raw=("application/json", "{}"))

    # every operation of the document answered a success here, validated against it
    succeeded = {(m, p) for m, p, status in call.seen if status < 300}
    missing = operations(fetch_schema(anon_api)) - succeeded
    assert not missing, f"operations without a validated success answer: {sorted(missing)}"
