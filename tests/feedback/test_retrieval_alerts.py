"""Retrieval quality alerts (docs/METRICS.md): the metric snapshots raise and resolve
``retrieval_hit_rate`` and ``retrieval_precision_at_1`` on the namespace's chain, with the
namespace's own thresholds, and the feed carries ``alert.raised`` / ``alert.resolved``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from feedback import metrics, snapshots
from feedback.models import Alert
from rms.models import Namespace
from tests.factories import scrape

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RETRIEVAL = {metrics.RETRIEVAL_HIT_RATE, metrics.RETRIEVAL_PRECISION_AT_1}


def _object(api, content):
    r = api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": content, "epistemic_type": "ASSERTED"},
        format="json",
    )
    assert r.status_code == 201, r.content
    return r.json()["id"]


def _session(api, n, injected, used=()):
    """A session injecting ``injected`` at ranks 1, 2, …; ``used`` are REFERENCED."""
    body = {
        "session_id": f"s-{n}", "request_id": f"r-{n}", "namespace_scope": ["support"],
        "context_budget": 1000, "tokens_used": 10,
        "injections": [
            {"object_id": oid, "token_cost": 10, "rank_position": k}
            for k, oid in enumerate(injected, 1)
        ],
        "signals": [
            {"object_id": oid, "signal_type": "REFERENCED", "detection_method": "observation"}
            for oid in used
        ],
    }  # fmt: skip
    r = api.post("/api/v1/feedback-sessions", body, format="json")
    assert r.status_code == 201, r.content


def _events(api, types):
    r = api.get("/api/v1/changes", {"types": types, "namespace": "support"})
    assert r.status_code == 200, r.content
    return [e for e in r.json()["results"] if e["data"]["metric"] in RETRIEVAL]


# The feed releases only committed positions (on PostgreSQL, below the transaction horizon):
# the writes must commit.
@pytest.mark.django_db(transaction=True)
def test_retrieval_alerts_raise_and_resolve_on_the_chain_and_in_the_feed(
    client_api, operator_api, admin_api
):
    # precision@1 must reach 0.75 in this namespace; hit rate keeps its default 0.50.
    ns = Namespace.objects.get(name="support")
    ns.alert_thresholds = {metrics.RETRIEVAL_PRECISION_AT_1: 0.75}
    ns.save(update_fields=["alert_thresholds"])
    with time_machine.travel(T0 - timedelta(minutes=30), tick=False):
        a, b = _object(client_api, "Alice prefers Python"), _object(client_api, "Alice uses vim")
        # 4 sessions: one uses a (rank 1), one uses b (rank 2), two use nothing.
        _session(client_api, 1, [a, b], used=[a])
        _session(client_api, 2, [a, b], used=[b])
        _session(client_api, 3, [a, b])
        _session(client_api, 4, [a, b])
    with time_machine.travel(T0, tick=False):
        # hit rate 2/4 = 0.50 is not below 0.50; precision@1 1/4 < 0.75: one alert.
        snapshots.take_snapshots()
        found = scrape(operator_api)
    opened = {x.metric: x for x in Alert.objects.filter(state=Alert.OPEN)}
    assert RETRIEVAL & set(opened) == {metrics.RETRIEVAL_PRECISION_AT_1}
    alert = opened[metrics.RETRIEVAL_PRECISION_AT_1]
    assert (alert.value, alert.threshold) == (0.25, 0.75)
    raised = _events(client_api, "alert.raised")
    assert [e["data"]["metric"] for e in raised] == [metrics.RETRIEVAL_PRECISION_AT_1]
    assert raised[0]["data"]["value"] == 0.25 and raised[0]["data"]["threshold"] == 0.75
    # The gauges show what the snapshot saw, beside the namespace's thresholds.
    support = ("namespace", "support")
    assert found[("rms_retrieval_hit_rate", (support,))] == 0.5
    assert found[("rms_retrieval_precision_at_rank", (support, ("rank", "1")))] == 0.25
    thresholds = {
        dict(labels)["metric"]: v
        for (name, labels), v in found.items()
        if name == "rms_retrieval_alert_threshold" and dict(labels)["namespace"] == "support"
    }
    assert thresholds == {metrics.RETRIEVAL_HIT_RATE: 0.5, metrics.RETRIEVAL_PRECISION_AT_1: 0.75}

    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        # 8 sessions using a at rank 1: precision@1 9/12 = 0.75, no longer below; hit rate 10/12.
        for n in range(5, 13):
            _session(client_api, n, [a, b], used=[a])
    with time_machine.travel(T0 + timedelta(minutes=2), tick=False):
        snapshots.take_snapshots()
        # The API answers the same states over the same window.
        r = operator_api.get(
            "/api/v1/retrieval-quality",
            {"namespace": "support", "since": (T0 + timedelta(minutes=2) - timedelta(hours=24))},
        )
    assert r.json()["alerts"] == {
        metrics.RETRIEVAL_HIT_RATE: {
            "value": 10 / 12, "threshold": 0.5, "direction": "below", "state": "ok"
        },
        metrics.RETRIEVAL_PRECISION_AT_1: {
            "value": 0.75, "threshold": 0.75, "direction": "below", "state": "ok"
        },
    }  # fmt: skip
    alert.refresh_from_db()
    assert (alert.state, alert.resolved_value) == (Alert.RESOLVED, 0.75)
    assert alert.resolved_at == T0 + timedelta(minutes=2)
    resolved = _events(client_api, "alert.resolved")
    assert [e["data"]["metric"] for e in resolved] == [metrics.RETRIEVAL_PRECISION_AT_1]
    # A namespace's threshold for a retrieval metric is set and validated like the four.
    r = admin_api.post(
        "/api/v1/namespaces",
        {"name": "tuned", "alert_thresholds": {metrics.RETRIEVAL_HIT_RATE: 0.9}},
        format="json",
    )
    assert r.status_code == 201, r.content
    bad = admin_api.post(
        "/api/v1/namespaces",
        {"name": "odd", "alert_thresholds": {"retrieval_mrr": 0.9}},
        format="json",
    )
    assert bad.status_code == 400 and "alert_thresholds" in bad.json()["error"]["fields"]


def test_no_data_neither_raises_nor_resolves():
    answer = {"sessions": 0, "hit_rate": None, "precision_at_rank": {}}
    evaluated = metrics.evaluate_retrieval(answer)
    assert {v["state"] for v in evaluated.values()} == {metrics.STATE_NO_DATA}
    assert metrics.alert_changes(evaluated, set()) == []
    assert metrics.alert_changes(evaluated, set(RETRIEVAL)) == []
    with pytest.raises(ValueError, match="Unknown metric"):
        metrics.resolve_thresholds({"retrieval_mrr": 0.3})


def test_the_api_accepts_thresholds_for_exactly_the_alerting_metrics():
    from rms.api import serializers

    assert serializers.METRIC_NAMES == metrics.ALERT_METRIC_NAMES
