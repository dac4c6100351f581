"""``GET /suppressed``: eligible objects that decayed below the bar or that no query can rank
into the top k, with hand-computed numbers; scoped by namespace."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from rms.models import Namespace
from tests.factories import T0, make_object

pytestmark = pytest.mark.django_db

AS_OF = T0 + timedelta(days=20)


def url(**params) -> str:
    query = {"namespace": "support", "as_of": AS_OF.isoformat(), **params}
    pairs = (f"{k}={v}".replace("+", "%2B") for k, v in query.items())
    return "/api/v1/suppressed?" + "&".join(pairs)


@pytest.fixture
def objs(admin_api, other_namespace):
    def make(content, **fields):
        return str(make_object(admin_api.row, content=content, ts=T0, **fields).pk)

    return {
        "rapid": make("rapid", epistemic_type="UNVERIFIED"),  # RAPID λ=0.2, salience 0.5
        "medium": make("medium", epistemic_type="ASSERTED"),  # MEDIUM λ=0.02
        "pinned": make("pinned", epistemic_type="UNVERIFIED"),
        "deprecated": make("deprecated", epistemic_type="UNVERIFIED"),
    }


def pin_and_deprecate(admin_api, objs):
    assert (
        admin_api.post(
            f"/api/v1/objects/{objs['pinned']}/pin", {"reason": "keep"}, format="json"
        ).status_code
        == 200
    )
    assert (
        admin_api.post(
            f"/api/v1/objects/{objs['deprecated']}/transition",
            {"to": "DEPRECATED", "reason": "wrong"},
            format="json",
        ).status_code
        == 200
    )


def test_decayed_matches_hand_computed_salience(admin_api, objs):
    pin_and_deprecate(admin_api, objs)
    body = admin_api.get(url()).json()
    assert body["salience_below"] == 0.05 and body["k"] == 5
    # Only the RAPID one: 0.5·e^(−0.2·20) = 0.00916 < 0.05; MEDIUM 0.5·e^(−0.4) = 0.335;
    # pinned does not decay; deprecated is not eligible. Four objects: nothing ranked out.
    assert [r["id"] for r in body["results"]] == [objs["rapid"]]
    (row,) = body["results"]
    assert row["reasons"] == ["decayed"]
    assert row["salience_effective"] == pytest.approx(0.5 * math.exp(-0.2 * 20), abs=1e-12)
    # A higher bar takes in the MEDIUM one too.
    body = admin_api.get(url(salience_below=0.4)).json()
    medium = {r["id"]: r for r in body["results"]}[objs["medium"]]
    assert medium["salience_effective"] == pytest.approx(0.5 * math.exp(-0.02 * 20), abs=1e-12)
    # Ten days earlier the RAPID one is at 0.5·e^(−2) = 0.0677, above the default bar.
    early = (T0 + timedelta(days=10)).isoformat()
    assert admin_api.get(url(as_of=early)).json()["results"] == []


def test_ranked_out_against_the_kth_best_mismatch(admin_api, other_namespace):
    Namespace.objects.filter(name="support").update(
        weights={"similarity": 0.2, "hotness": 0, "utility": 0, "confidence": 0.8, "salience": 0}
    )
    ids = {
        c: str(make_object(admin_api.row, content=f"c{c}", confidence=c, ts=T0).pk)
        for c in (0.9, 0.85, 0.8, 0.5)
    }
    body = admin_api.get(url(k=2, salience_below=0)).json()
    # 0.5 as a perfect match scores 0.2 + 0.8·0.5 = 0.6, below the 2nd best mismatch of the
    # others, 0.8·0.85 = 0.68; 0.8 scores 0.84 and stays reachable.
    (row,) = body["results"]
    assert row["id"] == ids[0.5] and row["reasons"] == ["ranked_out"]
    assert row["best_score"] == pytest.approx(0.6, abs=1e-12)
    assert row["kth_floor_score"] == pytest.approx(0.68, abs=1e-12)
    assert body["count"] == 1 and body["profile"]["weights"]["confidence"] == 0.8
    # With k = 3 the 3rd best of the others is 0.8·0.8 = 0.64 for the 0.5 one: still out.
    assert [r["id"] for r in admin_api.get(url(k=3, salience_below=0)).json()["results"]] == [
        ids[0.5]
    ]
    # k = 4 leaves only three others: nothing is ranked out.
    assert admin_api.get(url(k=4, salience_below=0)).json()["results"] == []


def test_scoped_and_checked(admin_api, objs, outsider_api, client_api):
    assert client_api.get(url()).status_code == 200
    r = outsider_api.get(url())
    assert r.status_code == 403 and "results" not in r.json()
    assert admin_api.get("/api/v1/suppressed").status_code == 400
    for bad in ({"salience_below": "2"}, {"salience_below": "nan"}, {"k": "0"}, {"k": "x"}):
        r = admin_api.get(url(**bad))
        assert r.status_code == 400 and set(bad) <= set(r.json()["error"]["fields"])


def test_pages(admin_api, other_namespace):
    for i in range(3):
        make_object(admin_api.row, content=f"r{i}", epistemic_type="UNVERIFIED", ts=T0)
    first = admin_api.get(url(page_size=2)).json()
    assert first["count"] == 3 and len(first["results"]) == 2
    second = admin_api.get(first["next"]).json()
    assert len(second["results"]) == 1 and second["next"] is None
