"""Read side of the feedback app: the SPEC §12 ranking as a selector."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from feedback import selectors
from rms.errors import DomainError
from tests.factories import T0, make_objects, post, session

pytestmark = pytest.mark.django_db


def test_rank_without_feedback_uses_the_start_utility_and_hotness_from_creation(client_api):
    a, b = (uuid.UUID(i) for i in make_objects(client_api, 2))
    week_later = T0 + timedelta(days=7)  # hotness (1 + 0)/(2 + 0) halved once: 0.25
    ranked = selectors.rank_candidates(
        client_api.row,
        "support",
        [{"object_id": a, "similarity": 0.2}, {"object_id": b, "similarity": 0.6}],
        now=week_later,
    )
    assert ranked["namespace"] == "support"
    assert [r["object_id"] for r in ranked["results"]] == [str(b), str(a)]
    top = ranked["results"][0]
    assert top["hotness"] == pytest.approx(0.25, abs=1e-15)
    assert (top["utility"], top["confidence"], top["similarity"]) == (0.5, 0.75, 0.6)
    # The default profile of a new namespace: SPEC §12's weights plus 0.30 · confidence.
    assert top["score"] == pytest.approx(
        0.45 * 0.6 + 0.30 * 0.25 + 0.25 * 0.5 + 0.30 * 0.75, abs=1e-15
    )


def test_rank_reads_uses_and_utility_from_the_aggregates(client_api):
    (a,) = make_objects(client_api, 1)
    post(client_api, session("u", [(a, 10)], [(a, "CONFIRMED")], outcome="SUCCESS", hours=1))
    a = uuid.UUID(a)
    used_at = T0 + timedelta(hours=1)
    (only,) = selectors.rank_candidates(
        client_api.row, "support", [{"object_id": a, "similarity": 0.0}], now=used_at
    )["results"]
    assert only["utility"] == 0.9 * 0.5 + 0.1 * 1.0
    assert only["hotness"] == 2 / 3  # one use, no time since it


def test_rank_refuses_what_the_client_may_not_rank(client_api, outsider_api, namespace):
    a = uuid.UUID(make_objects(client_api, 1)[0])
    candidates = [{"object_id": a, "similarity": 0.5}]
    with pytest.raises(DomainError) as forbidden:
        selectors.rank_candidates(outsider_api.row, "support", candidates)
    assert forbidden.value.status == 403
    with pytest.raises(DomainError) as unknown:
        selectors.rank_candidates(outsider_api.row, "billing", candidates)
    assert (unknown.value.status, unknown.value.fields) == (
        400,
        {"candidates": [f"Unknown object {a}."]},
    )
    namespace.weights = {"recency": 1.0}
    namespace.save()
    with pytest.raises(DomainError) as weights:
        selectors.rank_candidates(client_api.row, "support", candidates)
    assert (weights.value.code, weights.value.status) == ("bad_namespace_weights", 409)
