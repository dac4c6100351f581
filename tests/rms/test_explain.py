"""``GET /objects/{id}/explain``: why a confidence and a salience are what they are.

Histories are written through the real API (signals, pins, transitions, conditions), then
explained through the API; the explanation must chain exactly and end on the object's state.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import run_without_django

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
START = NOW - timedelta(days=120)
SERIES = ("confidence", "salience_base", "salience_effective")


@pytest.fixture(autouse=True)
def _frozen_clock():
    """One clock for the history, the explanation and the object's read-time decay."""
    with time_machine.travel(NOW, tick=False):
        yield


def create(api, **fields) -> str:
    body = {
        "namespace": "support",
        "content": "Alice prefers Python",
        "epistemic_type": "ASSERTED",
        "evidence_ids": ["doc-1"],
        "ts": START.isoformat(),
        **fields,
    }
    resp = api.post("/api/v1/objects", body, format="json")
    assert resp.status_code == 201, resp.json()
    return resp.json()["id"]


def signal(api, oid, signal_type, at, **fields):
    body = {"signal_type": signal_type, "session_id": "s-1", "ts": at.isoformat(), **fields}
    resp = api.post(f"/api/v1/objects/{oid}/signals", body, format="json")
    assert resp.status_code == 201, resp.json()
    return resp.json()


def explain(api, oid, as_of=None, status=200):
    query = {} if as_of is None else {"as_of": as_of.isoformat()}
    resp = api.get(f"/api/v1/objects/{oid}/explain", query)
    assert resp.status_code == status, resp.json()
    return resp.json()


def assert_adds_up(answer: dict, state: dict) -> None:
    """Each series chains from ``start`` to ``final`` and ``final`` is the state's value."""
    for name in SERIES:
        series = answer[name]
        value = series["start"]
        for step in series["steps"]:
            assert step["before"] == value, (name, step)
            value = step["after"]
        assert series["final"] == value, name
        assert abs(series["final"] - state[name]) <= 1e-12, (name, series["final"], state[name])
        by_kind = sum(v for k, v in series["totals"].items() if k != "change")
        assert abs(by_kind - (series["final"] - series["start"])) <= 1e-12


def controls(answer: dict, series: str = "confidence") -> dict[str, float]:
    out: dict[str, float] = {}
    for step in answer[series]["steps"]:
        for c in step.get("controls", []):
            out[c["control"]] = out.get(c["control"], 0.0) + c["cut"]
    return out


# --- the property: random histories through the real API -----------------------------------------

SIGNAL_TYPES = [
    "REFERENCED",
    "CONFIRMED",
    "TASK_COMPLETED_WITH",
    "CORROBORATED_BY_EXTERNAL",
    "CORRECTED",
    "CONTRADICTED_BY_OBSERVATION",
    "TASK_FAILED_WITH",
    "UNUSED",
]
signals = st.fixed_dictionaries(
    {
        "action": st.just("signal"),
        "signal_type": st.sampled_from(SIGNAL_TYPES),
        "detection_method": st.sampled_from(
            [None, "explicit_user", "response_analysis", "implicit_behavioural"]
        ),
        "actor_id": st.sampled_from(["agent-1", "user-1"]),
        "actor_type": st.sampled_from(["AI_AGENT", "HUMAN_USER"]),
        "session_id": st.sampled_from(["s-1", "s-2"]),
        "evidence_ids": st.sampled_from([[], ["doc-1"], ["doc-2"]]),
    }
)
admin_actions = st.one_of(
    st.fixed_dictionaries(
        {
            "action": st.just("pin"),
            "confidence": st.one_of(st.none(), st.floats(0.05, 1.0)),
        }
    ),
    st.just({"action": "unpin"}),
    st.just({"action": "deprecate"}),
    st.fixed_dictionaries(
        {"action": st.just("condition"), "state": st.sampled_from(["TRUE", "FALSE"])}
    ),
)
histories = st.tuples(
    st.sampled_from(["OBSERVED", "ASSERTED", "INFERRED", "CONDITIONAL", "UNVERIFIED"]),
    st.sampled_from(["SLOW", "MEDIUM", "RAPID", "PERMANENT"]),
    st.lists(
        st.tuples(
            st.integers(0, 96),  # hours since the previous action
            st.one_of(signals, signals, signals, signals, admin_actions),
        ),
        min_size=1,
        max_size=25,
    ),
)


def play(admin, client, oid, actions) -> None:
    at = START
    for hours, action in actions:
        at += timedelta(hours=hours)
        kind = action["action"]
        ts = at.isoformat()
        if kind == "signal":
            body = {k: v for k, v in action.items() if k != "action" and v is not None}
            resp = client.post(f"/api/v1/objects/{oid}/signals", {**body, "ts": ts}, format="json")
            assert resp.status_code == 201, resp.json()
            continue
        if kind == "pin":
            body = {"reason": "checked", "ts": ts}
            if action["confidence"] is not None:
                body["confidence"] = action["confidence"]
            resp = admin.post(f"/api/v1/objects/{oid}/pin", body, format="json")
        elif kind == "unpin":
            resp = admin.post(
                f"/api/v1/objects/{oid}/unpin", {"reason": "x", "ts": ts}, format="json"
            )
        elif kind == "deprecate":
            body = {"to": "DEPRECATED", "reason": "wrong", "ts": ts}
            resp = admin.post(f"/api/v1/objects/{oid}/transition", body, format="json")
        else:
            body = {"condition_state": action["state"], "ts": ts}
            resp = client.post(f"/api/v1/objects/{oid}/condition", body, format="json")
        # A refused change (409, or 400 for a pin above the type's limit) writes nothing.
        assert resp.status_code in (200, 400, 409), resp.json()


def whole_chain_explanation(oid: str, as_of: datetime) -> dict:
    """The explanation the plain way, to pin the selector's read against: every operation of
    the chain up to ``as_of`` as a model instance (payload decoded by the driver, row by row),
    the fold choosing what it reads."""
    from rms import explain as explaining
    from rms import replay
    from rms.models import MemoryObject, Operation

    obj = MemoryObject.objects.get(pk=oid)
    ops = Operation.objects.filter(target_id=oid, ts__lte=as_of).order_by("ts", "seq")
    answer = explaining.explain(
        map(replay.OpRecord.from_row, ops), created_at=obj.created_at, as_of=as_of
    )
    return {"id": oid, "namespace": obj.namespace.name, **answer}


def assert_same_as_whole_chain(oid: str, as_of: datetime) -> None:
    """``rms.selectors.object_explanation`` (only the rows the fold reads, payloads decoded in
    one call) answers exactly what folding the whole chain answers."""
    from rms import selectors
    from rms.models import MemoryObject

    obj = MemoryObject.objects.select_related("namespace").get(pk=oid)
    assert selectors.object_explanation(obj, as_of) == whole_chain_explanation(oid, as_of)


@pytest.mark.django_db
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories)
def test_explanation_of_any_history_chains_to_the_objects_state(admin_api, client_api, history):
    epistemic_type, decay_profile, actions = history
    oid = create(client_api, epistemic_type=epistemic_type, decay_profile=decay_profile)
    play(admin_api, client_api, oid, actions)
    answer = explain(client_api, oid)
    state = client_api.get(f"/api/v1/objects/{oid}").json()
    assert_adds_up(answer, state)
    # Midway through the history the explanation ends on the replayed state of that time.
    middle = START + timedelta(hours=sum(h for h, _ in actions) / 2)
    then = client_api.get(f"/api/v1/objects/{oid}/state", {"as_of": middle.isoformat()}).json()
    assert_adds_up(explain(client_api, oid, middle), then)
    assert_same_as_whole_chain(oid, NOW)
    assert_same_as_whole_chain(oid, middle)


@pytest.mark.django_db
def test_every_saturation_control_is_named_with_its_cut(admin_api, client_api):
    oid = create(client_api, epistemic_type="INFERRED", confidence=0.6)
    at = START + timedelta(days=1)
    # Reliability: response_analysis halves REFERENCED's 0.08.
    signal(client_api, oid, "REFERENCED", at, detection_method="response_analysis")
    # Correlation: an agent with no evidence of its own, 0.4 of 0.15.
    signal(client_api, oid, "CONFIRMED", at, actor_id="agent", actor_type="AI_AGENT")
    # Repeat: the same (actor, type, session) a second time gets 1/2.
    signal(client_api, oid, "CONFIRMED", at, actor_id="u", session_id="s-2")
    signal(client_api, oid, "CONFIRMED", at, actor_id="u", session_id="s-2")
    # Session cap: s-3 takes 0.40 in all; the third CONFIRMED finds 0.10 of room.
    for actor in ("a", "b", "c"):
        signal(client_api, oid, "CONFIRMED", at, actor_id=actor, session_id="s-3")
    # Ceiling: INFERRED stops at 0.85.
    for actor in ("a", "b", "c"):
        signal(client_api, oid, "CONFIRMED", at, actor_id=actor, session_id="s-4")
    answer = explain(client_api, oid)
    assert answer["confidence"]["final"] == 0.85
    # Floor: CORRECTED never takes confidence below 0.05.
    low = create(client_api, epistemic_type="UNVERIFIED", confidence=0.06)
    signal(client_api, low, "CORRECTED", at)
    cuts = controls(answer)
    assert cuts["reliability_discount"] == pytest.approx(0.04)
    assert cuts["correlation_discount"] == pytest.approx(0.15 - 0.06)
    assert cuts["repeat_diminishing"] == pytest.approx(0.075)
    assert cuts["session_cap"] == pytest.approx(2 * (0.15 - 0.10))  # in s-3 and s-4
    assert cuts["ceiling"] > 0
    floor = explain(client_api, low)
    step = floor["confidence"]["steps"][0]
    assert step["weight"] == {"name": "delta", "asked": 0.25, "applied": 0.25}
    assert step["controls"] == [
        {"control": "floor", "cut": pytest.approx(0.05 - 0.06 * 0.75), "unit": "confidence"}
    ]
    assert step["after"] == 0.05
    first = answer["confidence"]["steps"][0]
    assert first["weight"] == {"name": "gamma", "asked": 0.08, "applied": 0.04}
    assert first["signal_type"] == "REFERENCED"
    assert first["session_id"] == "s-1"
    assert first["actor_id"] == "client-1"
    state = client_api.get(f"/api/v1/objects/{oid}").json()
    assert_adds_up(answer, state)


@pytest.mark.django_db
def test_pinned_object_explained_without_decay_after_the_pin(admin_api, client_api):
    oid = create(client_api, epistemic_type="OBSERVED", decay_profile="FAST")
    signal(client_api, oid, "CONFIRMED", START + timedelta(days=1))
    pin_at = START + timedelta(days=5)
    resp = admin_api.post(
        f"/api/v1/objects/{oid}/pin",
        {"confidence": 0.99, "reason": "operator checked", "ts": pin_at.isoformat()},
        format="json",
    )
    assert resp.status_code == 200
    signal(client_api, oid, "CONFIRMED", START + timedelta(days=6), session_id="s-2")
    answer = explain(client_api, oid)
    assert answer["pinned"] is True
    steps = answer["confidence"]["steps"]
    pin = next(s for s in steps if s["op_type"] == "PIN")
    assert (pin["kind"], pin["after"], pin["confidence_requested"]) == ("admin", 0.99, 0.99)
    assert pin["actor_id"] == "admin-1" and pin["reason"] == "operator checked"
    # A pinned OBSERVED object above 0.97 is held there by the ceiling, not lowered.
    last = steps[-1]
    assert last["after"] == 0.99 and [c["control"] for c in last["controls"]] == ["ceiling"]
    effective = answer["salience_effective"]["steps"]
    decays = [s for s in effective if s["kind"] == "decay"]
    assert decays and all(datetime.fromisoformat(s["ts"]) <= pin_at for s in decays)
    assert_adds_up(answer, client_api.get(f"/api/v1/objects/{oid}").json())


@pytest.mark.django_db
def test_deprecated_object_shows_refused_reinforcement_and_applied_penalty(admin_api, client_api):
    oid = create(client_api)
    at = START + timedelta(days=2)
    resp = admin_api.post(
        f"/api/v1/objects/{oid}/transition",
        {"to": "DEPRECATED", "reason": "wrong", "ts": at.isoformat()},
        format="json",
    )
    assert resp.status_code == 200
    signal(client_api, oid, "CONFIRMED", at + timedelta(days=1))
    signal(client_api, oid, "CORRECTED", at + timedelta(days=2))
    answer = explain(client_api, oid)
    kinds = [(s["kind"], s["op_type"]) for s in answer["confidence"]["steps"]]
    assert kinds == [
        ("admin", "EPISTEMIC_TRANSITION"),
        ("rejected", "FEEDBACK_EVENT"),
        ("signal", "PENALTY"),
    ]
    transition, rejected, penalty = answer["confidence"]["steps"]
    assert transition["change"] == {"from": "ASSERTED", "to": "DEPRECATED"}
    assert rejected["reason"] == "object is DEPRECATED"
    assert rejected["before"] == rejected["after"] == 0.75
    assert penalty["after"] == 0.75 * 0.75
    assert answer["epistemic_type"] == "DEPRECATED"
    assert_adds_up(answer, client_api.get(f"/api/v1/objects/{oid}").json())


@pytest.mark.django_db
def test_decayed_object_explains_the_decay_since_its_last_reinforcement(client_api):
    oid = create(client_api, decay_profile="MEDIUM")
    reinforced = START + timedelta(days=10)
    signal(client_api, oid, "CONFIRMED", reinforced)
    answer = explain(client_api, oid)
    effective = answer["salience_effective"]
    last = effective["steps"][-1]
    assert last["kind"] == "decay"
    assert last["days_since_reinforcement"] == pytest.approx((NOW - reinforced).days)
    assert last["from_ts"] == reinforced.isoformat().replace("+00:00", ".000000+00:00")
    assert effective["final"] < answer["salience_base"]["final"]
    assert effective["totals"]["decay"] < 0
    assert_adds_up(answer, client_api.get(f"/api/v1/objects/{oid}").json())


@pytest.mark.django_db
def test_explain_is_scoped_and_refuses_bad_times(client_api, outsider_api):
    oid = create(client_api)
    explain(outsider_api, oid, status=404)
    gone = explain(client_api, oid, START - timedelta(seconds=1), status=404)
    assert gone["error"]["code"] == "not_found"
    resp = client_api.get(f"/api/v1/objects/{oid}/explain", {"as_of": "yesterday"})
    assert resp.status_code == 400 and "as_of" in resp.json()["error"]["fields"]
    resp = client_api.get(f"/api/v1/objects/{oid}/explain", {"asof": NOW.isoformat()})
    assert resp.status_code == 400 and "asof" in resp.json()["error"]["fields"]
    explain(client_api, "not-a-uuid", status=404)
    created = explain(client_api, oid, START)
    assert created["confidence"] == {
        "start": 0.75,
        "steps": [],
        "final": 0.75,
        "totals": {"signal": 0.0, "rejected": 0.0, "admin": 0.0, "decay": 0.0, "change": 0.0},
    }


def test_explain_module_imports_without_django():
    run_without_django("import rms.explain, rms.policy, rms.replay")


@pytest.mark.django_db
def test_explain_reads_the_chain_in_one_query_however_long(client_api, django_assert_num_queries):
    oid = create(client_api)
    signal(client_api, oid, "CONFIRMED", START + timedelta(days=1))
    # Auth (2), the object with its namespace, then one read of the chain.
    with django_assert_num_queries(4):
        explain(client_api, oid)
    for day in range(2, 12):
        signal(client_api, oid, "REFERENCED", START + timedelta(days=day), session_id=f"s-{day}")
    with django_assert_num_queries(4):
        explain(client_api, oid)


@pytest.mark.django_db
def test_explain_pauses_the_collector_for_its_request_only(client_api, monkeypatch):
    """The answer is built and rendered with the collector off (rms.gcpause), and it is back on
    after the request, answered or refused."""
    import gc

    from rms import selectors

    real = selectors.object_explanation
    seen = []

    def recording(obj, as_of):
        seen.append(gc.isenabled())
        return real(obj, as_of)

    monkeypatch.setattr(selectors, "object_explanation", recording)
    oid = create(client_api)
    signal(client_api, oid, "CONFIRMED", START + timedelta(days=1))
    assert gc.isenabled()
    answer = explain(client_api, oid)
    assert answer["confidence"]["steps"][0]["op_type"] == "REINFORCE"
    explain(client_api, oid, START - timedelta(days=1), status=404)
    assert seen == [False, False]
    assert gc.isenabled()
