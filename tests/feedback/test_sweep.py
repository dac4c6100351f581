"""The IGNORED_REPEATEDLY sweep (SPEC §9): decisions, numbers, the log, crashes and the trigger.

Streaks are built from real feedback sessions posted through the API, with explicit, increasing
``ts``; the sweep runs at a fixed ``NOW`` so two runs can be compared bit for bit.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from feedback import aggregates, rebuild, relevance
from feedback import sweep as sweep_mod
from feedback.models import FeedbackAggregate, InjectionEvent, SignalRecord
from feedback.sweep import sweep
from rms import services
from rms.errors import DomainError
from rms.models import MemoryObject, Operation
from rms.verification import verify_object_chain, verify_object_replay
from taskruns import enqueue
from tests.factories import (
    REFUND_CONTENT,
    REFUND_TEXT,
    T0,
    aggregate,
    build_sweep_twin,
    chain,
    ignored_checks,
    make_client,
    make_namespace,
    new_object,
    post,
    session,
    streak,
    sweep_state,
    unused_session,
)
from tests.factories import SWEEP_NOW as NOW

pytestmark = pytest.mark.django_db

# {customer, asks, whether, annual, plan, refunds, prorated} shares 3 of 9 words with
# REFUND_CONTENT → 1/3 ≥ 0.2 (see tests.factories.REFUND_TEXT)
# {refunds, weekly} shares 1 word of 6 with the content → 1/6 < 0.2
LOW_OVERLAP_TEXT = "refunds weekly"
WEATHER_TEXT = "Will it rain in Lisbon tomorrow afternoon"


def op_count() -> int:
    return Operation.objects.count()


SUMMARY_ZERO = {
    "examined": 0,
    "penalized": 0,
    "exempt": 0,
    "not_penalized": 0,
    "skipped_domain_checks": 0,
    "namespaces": [],
}


def summary(**counts) -> dict:
    return {**SUMMARY_ZERO, "namespaces": ["support"], **counts}


# --- the domain relevance check -------------------------------------------------------------------


def test_shared_tag_makes_sessions_relevant_and_the_penalty_applies(client_api):
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 5, tags=["Billing ", "sales"])
    assert sweep(now=NOW) == summary(examined=1, penalized=1)
    (check,) = ignored_checks(oid)
    assert check["domain_check"] == "passed" and check["applied"] is True
    assert (check["relevant_sessions"], check["irrelevant_sessions"]) == (5, 0)
    assert MemoryObject.objects.get(pk=oid).confidence == 0.75 * (1 - 0.05)


def test_lexically_similar_text_makes_sessions_relevant(client_api):
    assert relevance.jaccard(
        relevance.word_set(REFUND_TEXT), relevance.word_set(REFUND_CONTENT)
    ) == pytest.approx(1 / 3)
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 5, tags=["support-desk"], text=REFUND_TEXT)
    assert sweep(now=NOW) == summary(examined=1, penalized=1)
    assert ignored_checks(oid)[0]["relevant_sessions"] == 5


def test_irrelevant_sessions_mean_no_penalty(client_api):
    assert relevance.jaccard(
        relevance.word_set(LOW_OVERLAP_TEXT), relevance.word_set(REFUND_CONTENT)
    ) == pytest.approx(1 / 6)
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 3, tags=["weather"], text=WEATHER_TEXT)
    streak(client_api, [oid], 2, start=4, text=LOW_OVERLAP_TEXT)  # text only, below 0.2
    before = MemoryObject.objects.get(pk=oid)
    assert sweep(now=NOW) == summary(examined=1, not_penalized=1)
    (check,) = ignored_checks(oid)
    assert check["domain_check"] == "failed" and check["applied"] is False
    assert (check["relevant_sessions"], check["irrelevant_sessions"]) == (0, 5)
    after = MemoryObject.objects.get(pk=oid)
    assert (after.confidence, after.salience_base) == (before.confidence, before.salience_base)
    assert after.version == before.version + 1  # only the IGNORED_CHECK
    a = aggregate(oid)
    assert (a.unused_streak, a.unused_sessions, a.checked_unused_sessions) == (5, 5, 5)
    assert a.lifetime_delta_applied == 0.0 and a.last_negative_signal is None
    assert not SignalRecord.objects.filter(object_id=oid, signal_type="IGNORED_REPEATEDLY")


def test_sessions_without_context_skip_the_check_and_the_penalty_applies(client_api):
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 3)  # neither tags nor text
    streak(client_api, [oid], 2, start=4, tags=[], text="   ")  # blank is no context
    assert sweep(now=NOW) == summary(examined=1, penalized=1, skipped_domain_checks=1)
    (check,) = ignored_checks(oid)
    assert check["domain_check"] == "skipped" and check["applied"] is True
    assert check["unknown_sessions"] == 5
    assert any("skipped" in reason for reason in check["reasons"])


def test_relevant_plus_unknown_reaching_n_applies(client_api):
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 3, tags=["billing"])
    streak(client_api, [oid], 2, start=4)  # unknown
    streak(client_api, [oid], 1, start=6, tags=["weather"])  # irrelevant
    assert sweep(now=NOW) == summary(examined=1, penalized=1)
    (check,) = ignored_checks(oid)
    assert (check["relevant_sessions"], check["unknown_sessions"]) == (3, 2)
    assert (check["irrelevant_sessions"], check["unused_streak"]) == (1, 6)
    assert check["domain_check"] == "passed"


def test_irrelevant_majority_does_not_apply(client_api):
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 1, tags=["billing"])
    streak(client_api, [oid], 1, start=2)
    streak(client_api, [oid], 3, start=3, tags=["weather"])
    assert sweep(now=NOW) == summary(examined=1, not_penalized=1)
    check = ignored_checks(oid)[0]
    assert (check["relevant_sessions"], check["unknown_sessions"]) == (1, 1)
    assert check["irrelevant_sessions"] == 3 and check["domain_check"] == "failed"


def test_streak_sessions_are_the_last_unused_streak_injections(client_api):
    """Sessions before the last reset do not count: a REFERENCED ended the earlier streak."""
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 4, tags=["weather"])
    unused_session(client_api, [oid], 5, signals=[(oid, "REFERENCED")])
    streak(client_api, [oid], 5, start=6, tags=["billing"])
    assert aggregate(oid).unused_streak == 5
    sweep(now=NOW)
    (check,) = ignored_checks(oid)
    assert check["relevant_sessions"] == 5 and check["irrelevant_sessions"] == 0
    assert len(check["streak_feedback_session_ids"]) == 5


def test_a_session_the_sweep_cannot_load_is_unknown():
    """Missing session rows are judged "unknown" (RFC-0009 §7), through relevance.classify."""
    context = sweep_mod.SessionContexts().get("missing")
    assert context is relevance.NO_CONTEXT
    subject = relevance.Subject.of(["billing"], "refunds")
    assert relevance.classify(context, subject) == relevance.UNKNOWN


def test_a_streak_session_without_its_injection_row_counts_as_unknown(client_api, caplog):
    """A broken invariant must not stop the sweep: a session it cannot see it cannot judge."""
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 5, tags=["billing"])
    InjectionEvent.objects.filter(object_id=oid).order_by("ts").first().delete()
    assert sweep(now=NOW) == summary(examined=1, penalized=1)
    (check,) = ignored_checks(oid)
    assert check["sessions_missing"] == 1 and len(check["streak_feedback_session_ids"]) == 4
    assert (check["relevant_sessions"], check["unknown_sessions"]) == (4, 1)
    assert "no injection row" in caplog.text


# --- exemptions and thresholds --------------------------------------------------------------------


def test_permanent_pinned_and_deprecated_objects_are_exempt(client_api, admin_api):
    admin = admin_api.row
    permanent = new_object(client_api, decay_profile="PERMANENT")
    pinned = new_object(client_api)
    deprecated = new_object(client_api)
    services.object_pin(client=admin, object_id=pinned, reason="affirmed", ts=T0)
    services.object_transition(
        client=admin, object_id=deprecated, to="DEPRECATED", reason="stale", ts=T0
    )
    ids = [permanent, pinned, deprecated]
    before = {
        o.pk: (o.confidence, o.salience_base) for o in MemoryObject.objects.filter(pk__in=ids)
    }
    streak(client_api, ids, 5)
    assert sweep(now=NOW) == summary(examined=3, exempt=3)
    for oid, exemption in zip(ids, ["PERMANENT", "pinned", "DEPRECATED"], strict=True):
        (check,) = ignored_checks(oid)
        assert check["exemptions"] == [exemption]
        assert check["applied"] is False and check["domain_check"] == "not_run"
        obj = MemoryObject.objects.get(pk=oid)
        assert (obj.confidence, obj.salience_base) == before[oid]
        assert aggregate(oid).unused_streak == 5
    assert not Operation.objects.filter(op_type="PENALTY").exists()


def test_below_threshold_writes_no_check(client_api):
    oid = new_object(client_api)
    streak(client_api, [oid], 4)
    count = op_count()
    assert sweep(now=NOW) == SUMMARY_ZERO
    assert op_count() == count and ignored_checks(oid) == []


def test_threshold_is_per_namespace(client_api):
    make_namespace("strict", ignore_threshold=3)
    client, token = make_client("strict-client", "client", ["strict"])
    strict_api = APIClient()
    strict_api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    strict_api.row = client
    strict = new_object(strict_api, ns="strict")
    lenient = new_object(client_api)
    streak(strict_api, [strict], 3, ns="strict")
    streak(client_api, [lenient], 3)
    assert sweep(now=NOW) == {
        **summary(examined=1, penalized=1, skipped_domain_checks=1),
        "namespaces": ["strict"],
    }
    assert ignored_checks(strict)[0]["threshold"] == 3 and ignored_checks(lenient) == []
    assert sweep(namespace="support", now=NOW) == SUMMARY_ZERO


# --- idempotence and re-examination ---------------------------------------------------------------


def test_second_run_without_new_sessions_writes_nothing(client_api):
    penalized = new_object(client_api, domain_tags=["billing"])
    spared = new_object(client_api, domain_tags=["weather"])
    streak(client_api, [penalized, spared], 5, tags=["billing"])
    assert sweep(now=NOW) == summary(examined=2, penalized=1, not_penalized=1)
    count, objects = op_count(), list(MemoryObject.objects.order_by("pk").values())
    aggs = list(FeedbackAggregate.objects.order_by("pk").values())
    assert sweep(now=NOW) == SUMMARY_ZERO
    assert op_count() == count
    assert list(MemoryObject.objects.order_by("pk").values()) == objects
    assert list(FeedbackAggregate.objects.order_by("pk").values()) == aggs


def test_a_new_unused_session_after_a_check_makes_the_object_examined_again(client_api):
    spared = new_object(client_api, domain_tags=["weather"])
    penalized = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [spared, penalized], 5, tags=["billing"])
    sweep(now=T0 + timedelta(hours=5, minutes=30))
    assert aggregate(penalized).unused_streak == 0 and aggregate(spared).unused_streak == 5
    unused_session(client_api, [spared, penalized], 6, tags=["billing"])
    assert sweep(now=T0 + timedelta(hours=6, minutes=30)) == summary(examined=1, not_penalized=1)
    first, second = ignored_checks(spared)
    assert (first["unused_streak"], first["unused_sessions"]) == (5, 5)
    assert (second["unused_streak"], second["unused_sessions"]) == (6, 6)
    assert second["irrelevant_sessions"] == 6
    # the penalized object needs a whole new streak of N sessions
    streak(client_api, [penalized], 4, start=7, tags=["billing"])
    assert sweep(now=NOW) == summary(examined=1, penalized=1)
    assert [c["unused_sessions"] for c in ignored_checks(penalized)] == [5, 10]
    assert ignored_checks(penalized)[1]["unused_streak"] == 5


# --- the penalty, the log and the aggregates ------------------------------------------------------


def test_penalty_numbers_operation_order_and_payloads(client_api):
    oid = new_object(client_api, domain_tags=["billing"])
    streak(client_api, [oid], 5, tags=["billing"])
    before = MemoryObject.objects.get(pk=oid)
    sweep(now=NOW)
    obj = MemoryObject.objects.get(pk=oid)
    assert obj.confidence == 0.75 * (1 - 0.05)  # 0.7124999999999999
    assert obj.salience_base == 0.5 * (1 - 0.3 * 0.05) == 0.4925
    assert obj.reinforcement_count == 0 and obj.pinned is False
    assert obj.version == before.version + 3 and obj.last_op_ts == NOW

    check, event, penalty = chain(oid)[-3:]
    assert [check.op_type, event.op_type, penalty.op_type] == [
        "IGNORED_CHECK",
        "FEEDBACK_EVENT",
        "PENALTY",
    ]
    assert check.seq < event.seq < penalty.seq
    assert obj.head_hash == penalty.hash and event.prev_hash == check.hash
    for op in (check, event, penalty):
        assert (op.ts, op.actor_id, op.actor_type) == (NOW, "ignored-sweep", "SYSTEM_PROCESS")
    sessions = [s for s in chain(oid) if s.op_type == "INJECTION_EVENT"]
    assert check.payload == {
        "apply_penalty": True,
        "applied": True,
        "reasons": check.payload["reasons"],
        "domain_check": "passed",
        "relevant_sessions": 5,
        "irrelevant_sessions": 0,
        "unknown_sessions": 0,
        "exemptions": [],
        "unused_sessions": 5,
        "unused_streak": 5,
        "threshold": 5,
        "relevance_threshold": 0.2,
        "streak_feedback_session_ids": [
            s.payload["feedback_session_id"] for s in reversed(sessions)
        ],
    }
    assert check.payload["reasons"][1].startswith("Domain check passed")
    assert check.state is None  # an IGNORED_CHECK records a fact; it stores no object state
    assert event.payload["signal_type"] == "IGNORED_REPEATEDLY"
    assert event.payload["detection_method"] == "injection_tracking"
    assert event.payload["reliability_class"] == "LOW"
    assert (event.payload["effect"], event.payload["effective_weight"]) == ("penalized", 0.05)
    assert event.payload["ignored_check_id"] == str(check.id)
    assert event.session_id == penalty.session_id == "ignored-sweep"
    assert penalty.payload["delta"] == 0.05 and penalty.payload["delta_base"] == 0.05
    assert penalty.payload["confidence_before"] == 0.75
    assert penalty.payload["confidence_after"] == obj.confidence
    assert penalty.payload["salience_after"] == 0.4925
    assert penalty.payload["floor_applied"] is False

    record = SignalRecord.objects.get(object_id=oid, signal_type="IGNORED_REPEATEDLY")
    assert record.automatic is True and record.feedback_session_id is None
    assert record.operation_id == event.id and record.effective_weight == 0.05
    assert (record.session_id, record.ts, record.effect) == ("ignored-sweep", NOW, "penalized")

    a = aggregate(oid)
    assert a.unused_streak == 0  # reset by the penalty
    assert (a.unused_sessions, a.checked_unused_sessions) == (5, 5)
    assert a.total_unused == 5 and a.total_injections == 5
    assert a.lifetime_delta_applied == 0.05 and a.last_negative_signal == NOW
    assert verify_object_chain(obj) is None and verify_object_replay(obj) == []


def test_aggregates_after_the_sweep_equal_a_rebuild_from_the_log(client_api, admin_api):
    ids = [new_object(client_api, domain_tags=[tag]) for tag in ("billing", "weather", "x")]
    pinned = new_object(client_api)
    services.object_pin(client=admin_api.row, object_id=pinned, reason="ok", ts=T0)
    ids.append(pinned)
    streak(client_api, ids, 5, tags=["billing"])
    streak(client_api, ids[2:], 5, start=6)
    sweep(now=NOW)
    unused_session(client_api, ids, 40 * 24, signals=[(ids[1], "CONFIRMED")])
    sweep()
    folded = rebuild.fold_log(set(ids))
    for oid in ids:
        row = aggregate(oid)
        for f in aggregates.FIELDS:
            assert getattr(row, f) == getattr(folded[oid], f), (oid, f)
        assert row.usage_ratio == folded[oid].usage_ratio
    assert rebuild.rebuild_aggregates()["changed"] == 0
    # ids[0] (5 relevant) and ids[2] (5 irrelevant + 5 unknown ≥ 5); ids[1] spared, pinned exempt
    assert Operation.objects.filter(op_type="PENALTY").count() == 2
    assert len(ignored_checks(pinned)) == 2


def test_check_time_never_precedes_the_chain(client_api):
    oid = new_object(client_api)
    streak(client_api, [oid], 5)
    last = MemoryObject.objects.get(pk=oid).last_op_ts
    sweep(now=T0)  # earlier than the last session
    assert {op.ts for op in chain(oid)[-3:]} == {last}


def test_default_time_is_now_and_a_future_now_is_refused(client_api):
    oid = new_object(client_api)
    streak(client_api, [oid], 5)
    with pytest.raises(DomainError) as exc:
        sweep(now=datetime.now(UTC) + timedelta(hours=1))
    assert exc.value.code == "ts_in_future"
    start = datetime.now(UTC)
    sweep()
    assert chain(oid)[-1].ts >= start


def test_object_ids_restrict_the_sweep_and_progress_reaches_one(client_api):
    a, b = new_object(client_api), new_object(client_api)
    streak(client_api, [a, b], 5)
    seen: list[float] = []
    assert sweep(object_ids=[str(a)], now=NOW, progress=seen.append)["examined"] == 1
    assert seen == [1.0] and ignored_checks(b) == []
    seen.clear()
    assert sweep(object_ids=[a], now=NOW, progress=seen.append) == SUMMARY_ZERO
    assert seen == [1.0]


def test_a_change_between_the_candidate_read_and_the_lock_is_respected(client_api):
    """Another writer may reset a streak after the unlocked candidate query: re-checked under
    the lock, that object is not examined."""
    a, b = new_object(client_api), new_object(client_api)
    streak(client_api, [a, b], 5)
    from rms import store

    store_class = type(store.get())
    real_lock = store_class.lock_objects

    done = []

    def lock_after_a_concurrent_signal(self, ids, **kwargs):
        from feedback import services as feedback_services

        if done:  # the signal's own lock, and any later one
            return real_lock(self, ids, **kwargs)
        done.append(True)
        feedback_services.signal_record(
            client=client_api.row,
            object_id=a,
            data={"signal_type": "REFERENCED", "session_id": "late", "ts": NOW},
            body_hash="-",
        )
        return real_lock(self, ids, **kwargs)

    with mock.patch.object(store_class, "lock_objects", lock_after_a_concurrent_signal):
        assert sweep(now=NOW) == summary(examined=1, penalized=1, skipped_domain_checks=1)
    assert ignored_checks(a) == [] and len(ignored_checks(b)) == 1


def test_queries_do_not_grow_with_the_chunk(client_api):
    def run(n: int) -> int:
        ids = [new_object(client_api) for _ in range(n)]
        streak(client_api, ids, 5, tags=["t"], text="some words here")
        with CaptureQueriesContext(connection) as ctx:
            assert sweep(now=NOW)["examined"] == n
        return len(ctx.captured_queries)

    assert run(2) == run(7)


# --- crashes ----------------------------------------------------------------------------------


@pytest.fixture
def twin_namespaces(admin_api):
    make_namespace("crash")
    make_namespace("clean")
    admin = admin_api.row
    return build_sweep_twin(admin_api, admin, "crash"), build_sweep_twin(admin_api, admin, "clean")


def test_crash_after_a_chunk_then_rerun_equals_one_clean_run(twin_namespaces):
    crashed, clean = twin_namespaces

    class Crash(Exception):
        pass

    def crash(fraction: float) -> None:
        raise Crash(fraction)

    with pytest.raises(Crash):
        sweep(namespace="crash", chunk_size=2, progress=crash, now=NOW)
    done = Operation.objects.filter(op_type="IGNORED_CHECK", namespace="crash").count()
    assert done == 2  # the first chunk is committed, the rest untouched
    rest = sweep(namespace="crash", chunk_size=2, now=NOW)
    whole = sweep(namespace="clean", now=NOW)
    assert rest["examined"] == 5 and whole["examined"] == 7
    assert whole == {
        "examined": 7,
        "penalized": 4,
        "exempt": 2,
        "not_penalized": 1,
        "skipped_domain_checks": 1,
        "namespaces": ["clean"],
    }
    assert sweep_state(crashed) == sweep_state(clean)
    assert sweep(namespace="crash", now=NOW)["examined"] == 0


def test_crash_inside_a_chunk_rolls_the_chunk_back(twin_namespaces):
    crashed, clean = twin_namespaces
    real = sweep_mod._check_object
    calls = {"n": 0}

    def fail_on_the_fourth(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:  # second object of the second chunk
            raise RuntimeError("worker lost")
        return real(*args, **kwargs)

    with (
        mock.patch.object(sweep_mod, "_check_object", fail_on_the_fourth),
        pytest.raises(RuntimeError),
    ):
        sweep(namespace="crash", chunk_size=2, now=NOW)
    assert Operation.objects.filter(op_type="IGNORED_CHECK", namespace="crash").count() == 2
    sweep(namespace="crash", chunk_size=3, now=NOW)
    sweep(namespace="clean", now=NOW)
    assert sweep_state(crashed) == sweep_state(clean)


# --- the after-session trigger --------------------------------------------------------------------


def test_the_session_that_reaches_the_threshold_enqueues_a_sweep(
    client_api, django_capture_on_commit_callbacks
):
    a, b = new_object(client_api), new_object(client_api)
    streak(client_api, [a], 1)
    with mock.patch.object(enqueue, "sweep_objects") as queued:
        with django_capture_on_commit_callbacks(execute=True):
            streak(client_api, [a, b], 3, start=2)  # a at 4, b at 3
        queued.assert_not_called()
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            unused_session(client_api, [a, b], 5)
        assert len(callbacks) == 1
        queued.assert_called_once_with([a])
        # the task calls sweep(object_ids=...)
        assert (
            sweep(object_ids=queued.call_args.args[0], now=T0 + timedelta(hours=5, minutes=30))[
                "penalized"
            ]
            == 1
        )
        # a later session growing b's streak past N enqueues b only
        queued.reset_mock()
        with django_capture_on_commit_callbacks(execute=True):
            unused_session(client_api, [a, b], 6)
        queued.assert_called_once_with([b])


def test_a_reset_later_in_the_batch_or_a_refused_session_enqueues_nothing(
    client_api, django_capture_on_commit_callbacks
):
    a = new_object(client_api)
    streak(client_api, [a], 4)
    fifth = session("fifth", [(str(a), 10)], hours=5)
    used = session("used", [(str(a), 10)], [(str(a), "REFERENCED")], hours=6)
    with mock.patch.object(enqueue, "sweep_objects") as queued:
        with django_capture_on_commit_callbacks(execute=True):
            response = client_api.post("/api/v1/feedback-sessions/batch", [fifth, used], "json")
        assert [r["status"] for r in response.json()["results"]] == [201, 201]
        queued.assert_not_called()
        assert aggregate(a).unused_streak == 0
        streak(client_api, [a], 4, start=7)
        bad = session("bad", [(str(a), 10), (str(uuid.uuid4()), 5)], hours=11)
        with django_capture_on_commit_callbacks(execute=True):
            assert post(client_api, bad).status_code == 400
        queued.assert_not_called()


def test_a_broker_failure_after_commit_does_not_fail_the_session(
    client_api, django_capture_on_commit_callbacks, caplog
):
    a = new_object(client_api)
    streak(client_api, [a], 4)
    with (
        mock.patch.object(enqueue, "sweep_objects", side_effect=ConnectionError("broker down")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        unused_session(client_api, [a], 5)  # asserts 201
    assert "broker down" in caplog.text
    assert aggregate(a).unused_streak == 5
    assert sweep(now=NOW)["examined"] == 1  # the periodic sweep catches up


# --- PostgreSQL: two sweeps at once ---------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_sweeps_check_each_object_once(require_postgres, client_api):
    ids = [new_object(client_api, domain_tags=["billing"]) for _ in range(12)]
    streak(client_api, ids, 5, tags=["billing"])
    results, errors = [], []
    barrier = threading.Barrier(2)

    def worker() -> None:
        try:
            barrier.wait()
            results.append(sweep(chunk_size=3, now=NOW))
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(r["examined"] for r in results) == 12
    assert Operation.objects.filter(op_type="PENALTY").count() == 12
    for oid in ids:
        obj = MemoryObject.objects.get(pk=oid)
        assert obj.confidence == 0.75 * (1 - 0.05)
        assert verify_object_chain(obj) is None
