"""``/graph/expand`` takes the 100 seeds the contract allows — in the query string through the
server production runs, or in a POST body — and every error under ``/api/v1`` is JSON in the
contract's shape (404, 405, and the 400s Django itself answers)."""

from __future__ import annotations

import http.client
import json
import uuid

import pytest

from rms import evidence, services
from rms.api.edges import MAX_SEEDS
from tests.factories import make_client, make_namespace
from tests.servers import gunicorn


def _objects(client, n: int) -> list[str]:
    items = [
        {"namespace": "support", "content": f"fact {i}", "epistemic_type": "ASSERTED"}
        for i in range(n)
    ]
    return [str(o.pk) for o in services.object_create(client=client, items=items)]


def _related(client_api) -> tuple[str, str]:
    a, b = _objects(client_api.row, 2)
    resp = client_api.post(
        "/api/v1/relationships",
        {"source": a, "target": b, "relation": "uses", "extraction_context": evidence.EXPLICIT},
        format="json",
    )
    assert resp.status_code == 201, resp.content
    return a, b


def _error(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.content
    assert resp["Content-Type"].startswith("application/json")
    body = resp.json()
    assert body["error"]["code"] == code
    return body["error"]


def test_post_expands_like_get(client_api):
    a, b = _related(client_api)
    got = client_api.get("/api/v1/graph/expand", {"seed": f"{a}:0.8"})
    posted = client_api.post(
        "/api/v1/graph/expand", {"seeds": [{"object_id": a, "score": 0.8}]}, format="json"
    )
    assert posted.status_code == 200, posted.content
    # the same answer; the score decays with the clock between the two calls
    (one,) = got.json()["results"]
    (two,) = posted.json()["results"]
    assert two == {**one, "score": pytest.approx(one["score"], rel=1e-6)}
    assert [r["object_id"] for r in posted.json()["results"]] == [b]


def test_post_takes_the_hundred_seeds_the_contract_allows(client_api):
    a, b = _related(client_api)
    others = _objects(client_api.row, MAX_SEEDS - 1)
    seeds = [{"object_id": a, "score": 0.9}] + [{"object_id": o, "score": 0.5} for o in others]
    resp = client_api.post("/api/v1/graph/expand", {"seeds": seeds}, format="json")
    assert resp.status_code == 200, resp.content
    assert [r["object_id"] for r in resp.json()["results"]] == [b]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "seeds"),
        ({"seeds": []}, "seeds"),
        ({"seeds": [{"object_id": str(uuid.uuid4()), "score": 1}] * 101}, "seeds"),
        ({"seeds": [{"object_id": "nope", "score": 1}]}, "seeds.0.object_id"),
        ({"seeds": [{"object_id": str(uuid.uuid4()), "score": -1}]}, "seeds.0.score"),
        ({"seeds": [{"object_id": str(uuid.uuid4())}]}, "seeds.0.score"),
        ({"seeds": [{"object_id": str(uuid.uuid4()), "score": 1}], "limit": 3}, "limit"),
        ({"seeds": [{"object_id": str(uuid.uuid4()), "score": 1}]}, "seed.0"),  # unknown id
    ],
)
def test_post_with_bad_seeds_is_a_400_naming_the_field(client_api, body, field):
    resp = client_api.post("/api/v1/graph/expand", body, format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert any(name.split(".non_field_errors")[0] == field for name in error["fields"]), error


def test_more_than_a_hundred_query_seeds_is_a_json_400(client_api):
    query = "&".join(f"seed={uuid.uuid4()}:1" for _ in range(MAX_SEEDS + 1))
    error = _error(client_api.get(f"/api/v1/graph/expand?{query}"), 400, "validation_error")
    assert "seed" in error["fields"]


def test_a_host_not_allowed_is_a_json_400(client_api):
    _error(client_api.get("/api/v1/health", HTTP_HOST="evil.example"), 400, "bad_request")


def test_unknown_path_and_method_are_json(client_api):
    _error(client_api.get("/api/v1/no-such-thing"), 404, "not_found")
    _error(client_api.put("/api/v1/graph/expand", {}, format="json"), 405, "method_not_allowed")


@pytest.mark.django_db(transaction=True)
def test_a_hundred_seed_get_passes_through_gunicorn(tmp_path):
    make_namespace("support")
    client, token = make_client("client-1", "client", ["support"])
    ids = _objects(client, MAX_SEEDS)
    query = "&".join(f"seed={i}%3A0.123456789" for i in ids)
    with gunicorn(tmp_path, args=("-c", "python:rms.gunicorn_conf")) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        conn.request(
            "GET", f"/api/v1/graph/expand?{query}", headers={"Authorization": f"Token {token}"}
        )
        resp = conn.getresponse()
        body = resp.read()
        conn.request("GET", "/api/v1/no-such-thing", headers={"Authorization": f"Token {token}"})
        missing = conn.getresponse()
        missing_body = missing.read()
        conn.close()
    assert resp.status == 200, body[:300]
    assert json.loads(body) == {"results": []}
    assert missing.status == 404
    assert json.loads(missing_body)["error"]["code"] == "not_found"
