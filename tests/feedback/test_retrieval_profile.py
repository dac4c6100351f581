"""The retrieval profile (SPEC §12): one pure score for /rank, the simulations and the client's
mirror; eligibility; the clock ``now``; and the namespace settings that hold it."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rms_client import scoring

from feedback import retrieval, utility
from rms.models import Namespace
from tests.factories import T0, make_objects, post, run_without_django, session
from tests.strategies import inputs_st, profile_st, times, unit

DEPRECATED_REASON = "deprecated"


def rank(api, ids_sims, now=None, ns="support"):
    body = {
        "namespace": ns,
        "candidates": [{"object_id": oid, "similarity": sim} for oid, sim in ids_sims],
    }
    if now is not None:
        body["now"] = now.isoformat()
    return api.post("/api/v1/rank", body, format="json")


# --- the pure function and its copy in the client --------------------------------------------


def test_retrieval_module_imports_without_django():
    run_without_django(
        "import sys, feedback.retrieval; assert 'django' not in sys.modules, sorted(sys.modules)"
    )


@settings(max_examples=300, deadline=None)
@given(inputs=inputs_st, profile=profile_st, similarity=unit, now=times)
def test_client_copy_scores_as_the_server_to_1e_12(inputs, profile, similarity, now):
    server_profile = retrieval.profile_from(profile["weights"], profile["rules"])
    out = retrieval.profile_out(server_profile)
    client_profile = scoring.profile_from_out(out)
    assert scoring.profile_out(client_profile) == out
    ours = retrieval.rank_one(retrieval.RankingInputs(**inputs), similarity, now, server_profile)
    theirs = scoring.rank_one(scoring.RankingInputs(**inputs), similarity, now, client_profile)
    assert (theirs.eligible, theirs.reason) == (ours.eligible, ours.reason)
    for name in ("score", "hotness", "salience_effective"):
        assert math.isclose(getattr(theirs, name), getattr(ours, name), rel_tol=0, abs_tol=1e-12)


@settings(max_examples=200, deadline=None)
@given(inputs=inputs_st, similarity=unit, now=times, w=st.tuples(unit, unit, unit))
def test_the_three_spec_weights_give_exactly_the_spec_score(inputs, similarity, now, w):
    weights = dict(zip(("similarity", "hotness", "utility"), w, strict=True))
    profile = retrieval.profile_from(weights)
    ranked = retrieval.rank_one(retrieval.RankingInputs(**inputs), similarity, now, profile)
    hot = utility.hotness(inputs["uses"], inputs["last_use_at"], inputs["created_at"], now)
    assert ranked.score == utility.rank_score(similarity, hot, inputs["utility"], weights)


def test_profile_refuses_unknown_keys_and_out_of_range_values():
    for weights, rules in (
        ({"recency": 1.0}, None),
        ({"confidence": 1.5}, None),
        ({"salience": float("nan")}, None),
        (None, {"confidence_floor": -0.1}),
        (None, {"conditions": "sometimes"}),
        (None, {"floor": 0.2}),
    ):
        with pytest.raises(ValueError):
            retrieval.profile_from(weights, rules)


# --- /rank through the API -----------------------------------------------------------------


@pytest.mark.django_db
def test_rank_offers_a_deprecated_object_as_ineligible_and_last(client_api, admin_api):
    a, b = make_objects(client_api, 2)
    r = admin_api.post(
        f"/api/v1/objects/{a}/transition", {"to": "DEPRECATED", "reason": "wrong"}, format="json"
    )
    assert r.status_code == 200, r.content
    res = rank(client_api, [(a, 1.0), (b, 0.0)])
    assert res.status_code == 200, res.content
    results = res.json()["results"]
    assert [r["object_id"] for r in results] == [b, a]
    assert (results[0]["eligible"], results[0]["reason"]) == (True, None)
    assert (results[1]["eligible"], results[1]["reason"]) == (False, DEPRECATED_REASON)
    # Still scored, so an operator can see what it would have been.
    assert results[1]["score"] > results[0]["score"]


@pytest.mark.django_db
def test_rank_with_the_three_spec_weights_keeps_todays_scores(client_api, namespace):
    a, b = make_objects(client_api, 2)
    post(client_api, session("rk", [(a, 10), (b, 10)], [(a, "CONFIRMED")], outcome="SUCCESS"))
    namespace.weights = {"similarity": 0.5, "hotness": 0.2, "utility": 0.3}
    namespace.save()
    now = T0 + timedelta(days=3)
    results = {
        r["object_id"]: r for r in rank(client_api, [(a, 0.2), (b, 0.9)], now).json()["results"]
    }
    for oid, sim in ((a, 0.2), (b, 0.9)):
        r = results[oid]
        assert r["score"] == 0.5 * sim + 0.2 * r["hotness"] + 0.3 * r["utility"]


@pytest.mark.django_db
def test_rank_follows_the_namespace_profile_at_the_given_clock(client_api, admin_api):
    created = admin_api.post(
        "/api/v1/namespaces",
        {
            "name": "tuned",
            "weights": {
                "similarity": 0.4,
                "confidence": 0.3,
                "salience": 0.3,
                "hotness": 0.0,
                "utility": 0.0,
            },  # fmt: skip
            "retrieval": {"confidence_floor": 0.5, "conditions": "met"},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["retrieval"] == {"confidence_floor": 0.5, "conditions": "met"}
    client_api.row.namespaces.add(Namespace.objects.get(name="tuned"))
    items = [
        {"namespace": "tuned", "content": "fast", "epistemic_type": "ASSERTED",
         "decay_profile": "FAST", "ts": T0.isoformat()},
        {"namespace": "tuned", "content": "maybe", "epistemic_type": "CONDITIONAL",
         "ts": T0.isoformat()},
        {"namespace": "tuned", "content": "guess", "epistemic_type": "UNVERIFIED",
         "ts": T0.isoformat()},
    ]  # fmt: skip
    fast, cond, guess = (
        o["id"] for o in client_api.post("/api/v1/objects", items, format="json").json()
    )
    at = [T0 + timedelta(days=d) for d in (0, 10)]
    answers = [
        rank(client_api, [(fast, 0.5), (cond, 0.5), (guess, 0.5)], now, "tuned") for now in at
    ]
    assert all(a.status_code == 200 for a in answers), answers[0].content
    first, later = ({r["object_id"]: r for r in a.json()["results"]} for a in answers)
    assert answers[0].json()["profile"] == {
        "weights": {
            "similarity": 0.4,
            "hotness": 0.0,
            "utility": 0.0,
            "confidence": 0.3,
            "salience": 0.3,
        },  # fmt: skip
        "confidence_floor": 0.5,
        "conditions": "met",
    }
    # Effective salience decays at the request's clock: 0.5·exp(−0.07·10) ten days on.
    assert first[fast]["salience_effective"] == 0.5
    assert later[fast]["salience_effective"] == pytest.approx(0.5 * math.exp(-0.7), abs=1e-12)
    assert later[fast]["score"] == pytest.approx(
        0.4 * 0.5 + 0.3 * 0.75 + 0.3 * 0.5 * math.exp(-0.7), abs=1e-12
    )
    assert (first[fast]["eligible"], first[fast]["reason"]) == (True, None)
    assert (first[cond]["eligible"], first[cond]["reason"]) == (False, "condition_not_met")
    assert (first[guess]["eligible"], first[guess]["reason"]) == (False, "below_confidence_floor")


@pytest.mark.django_db
def test_rank_and_namespace_refuse_bad_profile_input(client_api, admin_api):
    (a,) = make_objects(client_api, 1)
    for now in ("yesterday", "", 12):
        body = {"namespace": "support", "candidates": [{"object_id": a, "similarity": 0.5}],
                "now": now}  # fmt: skip
        r = client_api.post("/api/v1/rank", body, format="json")
        assert r.status_code == 400 and "now" in r.json()["error"]["fields"], r.content
    for retrieval_rules in ({"confidence_floor": 2}, {"conditions": "always"}, {"x": 1}, []):
        r = admin_api.post(
            "/api/v1/namespaces",
            {"name": f"n-{uuid.uuid4().hex[:6]}", "retrieval": retrieval_rules},
            format="json",
        )
        assert r.status_code == 400 and any(
            k.startswith("retrieval") for k in r.json()["error"]["fields"]
        ), r.content
    r = admin_api.post(
        "/api/v1/namespaces", {"name": "n-w", "weights": {"recency": 0.5}}, format="json"
    )
    assert r.status_code == 400 and "weights" in r.json()["error"]["fields"], r.content
