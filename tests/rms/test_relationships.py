"""Relationships with Beta-Binomial confidence through the API (SPEC §13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from rms.edges import verify_edge_replay
from rms.models import Operation, Relationship
from rms.verification import chain_ops, first_break

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 9, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def objects(api, n, namespace="support"):
    body = [
        {
            "namespace": namespace,
            "content": f"o{i}",
            "epistemic_type": "ASSERTED",
            "ts": (NOW - timedelta(days=400)).isoformat(),
        }
        for i in range(n)
    ]
    return [o["id"] for o in api.post("/api/v1/objects", body, format="json").json()]


def edge(api, source, target, ctx="INFERRED", days_ago=0, relation="related_to"):
    r = api.post(
        "/api/v1/relationships",
        {
            "source": source,
            "target": target,
            "relation": relation,
            "extraction_context": ctx,
            "ts": (NOW - timedelta(days=days_ago)).isoformat(),
        },
        format="json",
    )
    assert r.status_code == 201, r.content
    return r.json()


def evidence(api, rel, kind="corroborate", provenance="external", days_ago=0, **kw):
    body = {"kind": kind, "ts": (NOW - timedelta(days=days_ago)).isoformat(), **kw}
    if provenance is not None:
        body["provenance"] = provenance
    return api.post(f"/api/v1/relationships/{rel['id']}/evidence", body, format="json")


def test_worked_example(client_api):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b)
    means = [rel["mean"]]
    for kind in ("corroborate", "corroborate", "corroborate", "contradict"):
        means.append(evidence(client_api, rel, kind).json()["mean"])
    assert means == pytest.approx([0.6, 7 / 11, 8 / 12, 9 / 13, 9 / 14], abs=1e-12)
    assert [round(m, 3) for m in means] == [0.6, 0.636, 0.667, 0.692, 0.643]
    final = client_api.get(f"/api/v1/relationships/{rel['id']}").json()
    assert (final["alpha"], final["beta"]) == pytest.approx((9.0, 5.0))
    assert set(final) >= {
        "id",
        "source",
        "target",
        "relation",
        "extraction_context",
        "alpha",
        "beta",
        "mean",
        "variance",
        "effective_confidence",
    }


@pytest.mark.parametrize(
    ("ctx", "mean"),
    [("AUTHORITATIVE", 1.0), ("EXPLICIT", 0.9), ("INFERRED", 0.6), ("SPECULATIVE", 0.3)],
)
def test_priors_with_concentration_10(client_api, ctx, mean):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, ctx)
    assert rel["mean"] == pytest.approx(mean) and rel["alpha"] + rel["beta"] == pytest.approx(10)


@pytest.mark.parametrize(
    ("provenance", "weight"), [("external", 1.0), ("user", 0.8), ("self", 0.05), (None, 0.05)]
)
def test_weights_per_provenance(client_api, provenance, weight):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b)
    after = evidence(client_api, rel, "corroborate", provenance).json()
    assert after["alpha"] == pytest.approx(6.0 + weight, abs=1e-12)
    contra = evidence(client_api, rel, "contradict", provenance).json()
    assert contra["beta"] == pytest.approx(4.0 + weight, abs=1e-12)


def test_variance_shrinks_with_evidence(client_api):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b)
    variances = [rel["variance"]]
    for _ in range(4):
        variances.append(evidence(client_api, rel).json()["variance"])
    assert variances == sorted(variances, reverse=True) and variances[-1] < variances[0] / 1.5
    assert variances[0] == pytest.approx(6 * 4 / (100 * 11), abs=1e-15)


@pytest.mark.parametrize(("days", "expected"), [(0, 0.6), (90, 0.3), (180, 0.15)])
def test_decay_half_life_90_days(client_api, days, expected):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, days_ago=days)
    assert rel["effective_confidence"] == pytest.approx(expected, abs=1e-12)


def test_decay_floor(client_api):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, "SPECULATIVE", days_ago=365)
    assert rel["effective_confidence"] == 0.05


def test_only_user_or_external_corroboration_resets_the_clock(client_api):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, days_ago=90)
    after_self = evidence(client_api, rel, provenance="self", days_ago=10).json()
    assert after_self["last_corroborated_at"] is None
    assert after_self["effective_confidence"] == pytest.approx(after_self["mean"] / 2, abs=1e-12)
    after_user = evidence(client_api, rel, provenance="user", days_ago=0).json()
    assert after_user["effective_confidence"] == after_user["mean"]


def test_as_of_before_between_and_after(client_api):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, days_ago=30)
    evidence(client_api, rel, days_ago=20)
    evidence(client_api, rel, "contradict", days_ago=10)
    at = lambda d: client_api.get(  # noqa: E731
        f"/api/v1/relationships/{rel['id']}",
        {"as_of": (NOW - timedelta(days=d)).isoformat()},
    )
    assert at(31).status_code == 404
    assert at(25).json()["mean"] == pytest.approx(0.6)
    between = at(15).json()
    assert between["mean"] == pytest.approx(7 / 11) and between["version"] == 2
    assert between["effective_confidence"] == pytest.approx(7 / 11 * 0.5 ** (5 / 90), abs=1e-12)
    assert at(0).json()["mean"] == pytest.approx(7 / 12)


def test_errors(client_api, outsider_api, operator_api):
    a, b = objects(client_api, 2)
    (c,) = objects(outsider_api, 1, namespace="billing")
    post = lambda body: client_api.post("/api/v1/relationships", body, format="json")  # noqa: E731
    base = {"source": a, "target": b, "relation": "r", "extraction_context": "INFERRED"}
    assert post({**base, "target": a}).status_code == 400
    assert post({**base, "target": c}).status_code == 400  # invisible object
    assert post({**base, "extraction_context": "RUMOUR"}).status_code == 400
    assert post({**base, "ts": "2999-01-01T00:00:00Z"}).status_code == 400
    rel = edge(client_api, a, b)
    assert post(base | {"relation": "related_to"}).status_code == 409
    assert evidence(client_api, rel, provenance="bot").status_code == 400
    assert evidence(client_api, rel, kind="maybe").status_code == 400
    assert evidence(client_api, rel, days_ago=0).status_code == 200
    assert evidence(client_api, rel, days_ago=5).status_code == 409  # before the latest
    assert outsider_api.get(f"/api/v1/relationships/{rel['id']}").status_code == 404
    assert evidence(outsider_api, rel).status_code == 404
    assert operator_api.post("/api/v1/relationships", base, format="json").status_code == 403
    assert client_api.get("/api/v1/relationships/nope").status_code == 404


def test_expansion(client_api, admin_api):
    a, b, c, d, e = objects(client_api, 5)
    ab = edge(client_api, a, b, "EXPLICIT")  # 0.9
    ca = edge(client_api, c, a, "INFERRED")  # 0.6, reached backwards from a
    edge(client_api, a, d, "SPECULATIVE", days_ago=200)  # 0.3·0.5^(200/90) < 0.1: not followed
    eb = edge(client_api, e, b, "AUTHORITATIVE")  # 1.0
    r = client_api.get("/api/v1/graph/expand", {"seed": [f"{a}:0.8", f"{e}:0.5"]})
    results = {x["object_id"]: x for x in r.json()["results"]}
    assert set(results) == {b, c}
    assert results[b]["score"] == pytest.approx(0.8 * 0.9) and results[b]["path"] == [ab["id"]]
    assert results[c]["score"] == pytest.approx(0.8 * 0.6) and results[c]["path"] == [ca["id"]]
    # a weak seed: 0.15 · 0.6 < 0.1 is dropped, 0.15 · 0.9 kept
    weak = client_api.get("/api/v1/graph/expand", {"seed": f"{a}:0.15"}).json()["results"]
    assert [x["object_id"] for x in weak] == [b]
    # deprecated neighbours are skipped
    admin_api.post(
        f"/api/v1/objects/{b}/transition", {"to": "DEPRECATED", "reason": "x"}, format="json"
    )
    again = client_api.get("/api/v1/graph/expand", {"seed": f"{a}:0.8"}).json()["results"]
    assert [x["object_id"] for x in again] == [c]
    assert eb["id"]


def test_expansion_scope_and_errors(client_api, outsider_api):
    a, b = objects(client_api, 2)
    edge(client_api, a, b)
    assert outsider_api.get("/api/v1/graph/expand", {"seed": f"{a}:1"}).status_code == 400
    assert client_api.get("/api/v1/graph/expand").status_code == 400
    assert client_api.get("/api/v1/graph/expand", {"seed": "nope"}).status_code == 400
    assert client_api.get("/api/v1/graph/expand", {"seed": f"{a}:nan"}).status_code == 400
    assert client_api.get("/api/v1/graph/expand", {"seed": f"{a}:-1"}).status_code == 400


def test_calibration(client_api, outsider_api):
    objs = objects(client_api, 6)
    spec = [edge(client_api, objs[0], objs[i], "SPECULATIVE") for i in (1, 2)]
    inferred = edge(client_api, objs[3], objs[4], "INFERRED")
    evidence(client_api, spec[0], "corroborate", "user")
    evidence(client_api, spec[0], "contradict", "external")
    evidence(client_api, spec[1], "contradict", "user")
    evidence(client_api, spec[1], "corroborate", "self")  # self evidence does not count
    evidence(client_api, inferred, "corroborate", "external")
    rows = {
        r["extraction_context"]: r
        for r in client_api.get("/api/v1/calibration?namespace=support").json()["results"]
    }
    s = rows["SPECULATIVE"]
    assert (s["edges"], s["observations"], s["corroborations"]) == (2, 3, 1)
    assert s["observed"] == pytest.approx(1 / 3) and s["difference"] == pytest.approx(1 / 3 - 0.3)
    assert rows["INFERRED"]["observed"] == 1.0
    assert rows["EXPLICIT"]["observed"] is None
    assert outsider_api.get("/api/v1/calibration?namespace=support").status_code == 403


def test_edge_log_replays_and_chains(client_api):
    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, days_ago=3)
    for d, kind in ((2, "corroborate"), (1, "contradict"), (0, "corroborate")):
        evidence(client_api, rel, kind, "user", days_ago=d)
    row = Relationship.objects.get(pk=rel["id"])
    assert verify_edge_replay(row) == []
    assert first_break(chain_ops(row.pk), row.head_hash) is None
    op = Operation.objects.filter(target_id=row.pk, op_type="EDGE_EVIDENCE").first()
    Operation.objects.filter(seq=op.seq).update(state={**op.state, "alpha": 99.0})
    assert [m["seq"] for m in verify_edge_replay(row)] == [op.seq]
    assert first_break(chain_ops(row.pk), row.head_hash)["seq"] == op.seq


def test_verify_tasks_cover_relationships(client_api):
    """verify_replay_all and verify_chain_all walk edge chains too (issue: relationships)."""
    from rms.verification import verify_chain_all, verify_replay_all

    a, b = objects(client_api, 2)
    rel = edge(client_api, a, b, days_ago=2)
    evidence(client_api, rel, days_ago=1)
    assert verify_replay_all()["ok"] and verify_chain_all()["ok"]
    op = Operation.objects.filter(target_id=rel["id"], op_type="EDGE_EVIDENCE").get()
    Operation.objects.filter(seq=op.seq).update(state={**op.state, "beta": 1.0})
    replayed, chained = verify_replay_all(), verify_chain_all()
    assert not replayed["ok"] and replayed["mismatches"][0]["relationship_id"] == rel["id"]
    assert not chained["ok"] and chained["mismatches"][0]["seq"] == op.seq
