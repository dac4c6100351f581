"""Attacking this round's endpoints and pages: namespace scoping, hostile input and Redis away.

Each test is an attack through the real stack (DRF test client, the real cache backend pointed
at a closed port, the erasure task run as a worker runs it); a defect found is pinned by a test
that failed before its mend. What was tried is listed in docs/DECISIONS.md ("Attacking this
round's endpoints")."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest
from django.test import Client
from rest_framework.test import APIClient

from rms.celery import app
from taskruns import tasks
from taskruns.models import TaskRun
from tests.factories import api_signal, make_client, make_namespace

pytestmark = pytest.mark.django_db


def as_api(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


def run_erasure(api, kind: str, subject: str, namespace: str) -> dict:
    """POST the erasure, run its task here as a worker would; the receipt."""
    body = {"subject": {"kind": kind, "id": subject}, "namespace": namespace, "reason": "Art. 17"}
    resp = api.post("/api/v1/erasures", body, format="json")
    assert resp.status_code == 202, resp.content
    out = resp.json()
    assert tasks.run_task.run(out["task"]) == TaskRun.SUCCEEDED
    return api.get(f"/api/v1/erasures/{out['id']}").json()


# --- erasure: confined to its namespace ------------------------------------------------------


def keyed_signal(client_api, actor_id: str) -> tuple[str, dict, dict]:
    """A signal of ``actor_id`` with a request_id on a new ``support`` object: the object id,
    the signal's fields and its first answer (stored for its retries)."""
    oid = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "Support-only fact", "epistemic_type": "ASSERTED"},
        format="json",
    ).json()["id"]
    keyed = {"actor_id": actor_id, "request_id": str(uuid.uuid4())}
    first = api_signal(client_api, oid, **keyed)
    assert first.status_code == 201, first.content
    return oid, keyed, first.json()


def test_an_erasure_in_one_namespace_leaves_another_namespaces_stored_answers_alone(
    client_api, other_namespace
):
    """An actor id is not unique across namespaces: erasing actor ``alice`` in ``billing`` (by
    an admin confined to billing) must not rewrite the stored answer of ``alice``'s keyed signal
    in ``support``, which a retry there returns."""
    oid, keyed, first = keyed_signal(client_api, "alice-support")
    billing_admin = as_api(make_client("billing-admin", "admin", ["billing"])[1])
    receipt = run_erasure(billing_admin, "actor", "alice-support", "billing")
    assert receipt["state"] == "completed", receipt
    retry = api_signal(client_api, oid, **keyed)
    assert retry.status_code == 200, retry.content
    assert retry.json() == first
    assert retry.json()["operation"]["actor_id"] == "alice-support"
    assert receipt["counts"]["stored_answers"] == 0, receipt


def test_an_erasure_in_the_answers_namespace_still_rewrites_it(client_api, admin_api):
    oid, keyed, first = keyed_signal(client_api, "alice-support")
    receipt = run_erasure(admin_api, "actor", "alice-support", "support")
    assert receipt["counts"]["stored_answers"] == 1, receipt
    retry = api_signal(client_api, oid, **keyed)
    assert retry.status_code == 200, retry.content
    assert "alice-support" not in retry.content.decode()
    assert retry.json()["operation"]["id"] == first["operation"]["id"]


# --- Redis away: the cache and the broker ----------------------------------------------------

DEAD_REDIS = "redis://127.0.0.1:1/0"  # port 1: nothing listens there


@pytest.fixture
def redis_down(settings):
    """The cache and the broker at a closed port, with the production cache backend."""
    settings.CACHES = {
        "default": {
            "BACKEND": "rms.cache.TolerantRedisCache",
            "LOCATION": DEAD_REDIS,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    with broker_at(DEAD_REDIS):
        settings.CELERY_BROKER_URL = DEAD_REDIS
        settings.CELERY_BROKER_IS_EMBEDDED = False
        yield


@contextmanager
def broker_at(url: str):
    """The Celery app publishing to ``url`` (its connection pools dropped before and after, so
    neither this test nor a later one reuses the other's broker)."""

    def drop_pools():
        app._pool = None
        app.amqp._producer_pool = None

    saved = app.conf.broker_url  # read first: the app loads its settings on first use
    app.conf.broker_url = url
    drop_pools()
    try:
        yield
    finally:
        app.conf.broker_url = saved
        drop_pools()


def warning_codes(answer: dict) -> list[str]:
    return [w["code"] for w in answer.get("warnings", [])]


def test_with_the_cache_away_suppressed_is_computed_and_says_the_cache_is_unavailable(
    client_api, redis_down
):
    client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "fact", "epistemic_type": "ASSERTED"},
        format="json",
    )
    resp = client_api.get("/api/v1/suppressed?namespace=support")
    assert resp.status_code == 200, resp.content
    answer = resp.json()
    assert answer["cached"] is False
    assert warning_codes(answer) == ["cache_unavailable"]
    assert "cache" in answer["warnings"][0]["message"]


def test_with_the_cache_up_suppressed_has_no_warning(client_api):
    answer = client_api.get("/api/v1/suppressed?namespace=support").json()
    assert answer.get("warnings", []) == []


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_away_an_erasure_is_accepted_and_says_it_is_not_started_yet(
    admin_api, redis_down
):
    body = {"subject": {"kind": "actor", "id": "alice"}, "namespace": "support", "reason": "x"}
    resp = admin_api.post("/api/v1/erasures", body, format="json")
    assert resp.status_code == 202, resp.content
    answer = resp.json()
    assert warning_codes(answer) == ["broker_unavailable"]
    run = TaskRun.objects.get(pk=answer["task"])
    assert (run.state, run.sent_at) == (TaskRun.QUEUED, None)  # kept for the reconciler


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_up_an_erasure_has_no_warning(admin_api):
    body = {"subject": {"kind": "actor", "id": "alice"}, "namespace": "support", "reason": "x"}
    resp = admin_api.post("/api/v1/erasures", body, format="json")
    assert resp.status_code == 202, resp.content
    assert resp.json().get("warnings", []) == []
    assert TaskRun.objects.get(pk=resp.json()["task"]).sent_at is not None


# --- namespace scoping of this round's reads --------------------------------------------------

SECRET = "support-secret-content-4471"


@pytest.fixture
def support_world(client_api, admin_api):
    """``support`` with an object, a session (its object.ranking event), a profile change and
    an erasure (object.erased): every opt-in event type of this round exists there."""
    ids = [
        client_api.post(
            "/api/v1/objects",
            {"namespace": "support", "content": f"{SECRET} {i}", "epistemic_type": "ASSERTED"},
            format="json",
        ).json()["id"]
        for i in range(2)
    ]
    body = {
        "session_id": "conv-1",
        "request_id": "r-1",
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 10,
        "injections": [{"object_id": ids[0], "rank_position": 1, "token_cost": 10}],
        "signals": [{"object_id": ids[0], "signal_type": "REFERENCED"}],
    }
    assert client_api.post("/api/v1/feedback-sessions", body, format="json").status_code == 201
    weights = {"weights": {"similarity": 0.5, "confidence": 0.3, "hotness": 0.2}}
    assert admin_api.patch("/api/v1/namespaces/support", weights, format="json").status_code == 200
    run_erasure(admin_api, "object", ids[1], "support")
    return ids


def no_support_data(resp) -> None:
    text = resp.content.decode()
    assert SECRET not in text and "support-secret" not in text, text[:300]


READS = [
    "/api/v1/ranking-state?namespace={ns}",
    "/api/v1/suppressed?namespace={ns}",
    "/api/v1/suppressed?namespace={ns}&as_of=2030-01-01T00:00:00Z",
    "/api/v1/retrieval-quality?namespace={ns}",
    "/api/v1/changes?namespace={ns}&types=object.ranking,namespace.profile_changed,object.erased",
    "/api/v1/namespaces/{ns}",
]


@pytest.mark.parametrize("path", READS)
def test_another_namespace_and_no_namespace_answer_alike(outsider_api, support_world, path):
    """A client of ``billing`` asking for ``support`` gets what it gets for a namespace that
    does not exist, word for word but the name (403 by query, 404 in the path): existence does
    not leak."""
    seen = outsider_api.get(path.format(ns="support"))
    unknown = outsider_api.get(path.format(ns="no-such-ns"))
    status, code = (404, "not_found") if "namespaces/" in path else (403, "forbidden")
    assert seen.status_code == unknown.status_code == status, seen.content
    assert seen.json()["error"]["code"] == unknown.json()["error"]["code"] == code
    assert seen.json()["error"]["message"].replace("support", "X") == unknown.json()["error"][
        "message"
    ].replace("no-such-ns", "X")
    no_support_data(seen)


def test_another_namespaces_objects_are_404_or_unknown_everywhere(outsider_api, support_world):
    oid = support_world[0]
    explain = f"/api/v1/objects/{oid}/explain"
    for path in (explain, f"{explain}?as_of=2020-01-01T00:00:00Z"):
        resp = outsider_api.get(path)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
        assert resp.json() == outsider_api.get(path.replace(oid, str(uuid.uuid4()))).json()
    rank = {"namespace": "billing", "candidates": [{"object_id": oid, "similarity": 1.0}]}
    resp = outsider_api.post("/api/v1/rank", rank, format="json")
    ghost = {**rank, "candidates": [{"object_id": str(uuid.uuid4()), "similarity": 1.0}]}
    other = outsider_api.post("/api/v1/rank", ghost, format="json")
    assert resp.status_code == other.status_code == 400
    assert resp.json()["error"]["code"] == other.json()["error"]["code"] == "unknown_object"
    no_support_data(resp)


@pytest.mark.django_db(transaction=True)  # PostgreSQL's feed releases only committed events
def test_the_unfiltered_feed_with_every_opt_in_type_shows_no_other_namespace(
    outsider_api, client_api, support_world
):
    types = "types=object.created,object.ranking,namespace.profile_changed,object.erased"
    mine = client_api.get(f"/api/v1/changes?{types}&limit=1000").json()["results"]
    assert {e["type"] for e in mine} == {
        "object.created", "object.ranking", "namespace.profile_changed", "object.erased",
    }  # fmt: skip
    theirs = outsider_api.get(f"/api/v1/changes?{types}&limit=1000")
    assert theirs.status_code == 200 and theirs.json()["results"] == []
    no_support_data(theirs)


def test_a_ranking_state_cursor_of_one_namespace_is_refused_in_another(support_world):
    both = as_api(make_client("both", "client", ["support", "billing"])[1])
    first = both.get("/api/v1/ranking-state?namespace=support&page_size=1").json()
    cursor = first["next_cursor"]
    assert cursor, first
    resp = both.get(f"/api/v1/ranking-state?namespace=billing&cursor={cursor}")
    assert resp.status_code == 400 and "cursor" in resp.json()["error"]["fields"]
    tampered = cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB")
    resp = both.get(f"/api/v1/ranking-state?namespace=support&cursor={tampered}")
    assert resp.status_code == 400 and "cursor" in resp.json()["error"]["fields"]


# --- the served suppressed listing: what a client can make the worker do ----------------------


def test_distinct_bars_asked_by_a_client_do_not_multiply_the_warming(client_api):
    from feedback.selectors import suppressed

    client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "fact", "epistemic_type": "ASSERTED"},
        format="json",
    )
    for i in range(100):
        resp = client_api.get(f"/api/v1/suppressed?namespace=support&salience_below={i / 1000}")
        assert resp.status_code == 200
    # The four most recent bars are warmed (0.096-0.099); the default (0.05) was scored on its
    # request, recently enough to be skipped. Nothing of the other 95.
    assert suppressed.warm() == suppressed.WATCHED_PER_NAMESPACE


def test_a_namespace_erasure_naming_another_namespace_is_400_and_erases_nothing(admin_api):
    """Erasing a namespace is irreversible: a subject naming ``billing`` in a request for
    ``support`` is a contradiction, refused, never read as "erase support"."""
    from erasure.models import Erasure

    make_namespace("billing")
    for sid in ("billing", 5, {"a": 1}, ""):
        body = {"subject": {"kind": "namespace", "id": sid}, "namespace": "support", "reason": "x"}
        resp = admin_api.post("/api/v1/erasures", body, format="json")
        assert resp.status_code == 400, (sid, resp.content)
        assert "subject.id" in resp.json()["error"]["fields"], resp.json()
    assert not Erasure.objects.exists() and not TaskRun.objects.exists()
    for sid in ("support", None):  # the namespace itself, or left out: still accepted
        body = {"subject": {"kind": "namespace", "id": sid}, "namespace": "support", "reason": "x"}
        if sid is None:
            del body["subject"]["id"]
        assert admin_api.post("/api/v1/erasures", body, format="json").status_code == 202


def test_with_redis_away_the_reads_and_the_profile_patch_answer(client_api, admin_api, redis_down):
    """Nothing of rank, ranking-state, retrieval-quality, explain or a PATCH needs Redis: the
    throttle fails open (``rms.cache``) and each answers in full."""
    oid = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "fact", "epistemic_type": "ASSERTED"},
        format="json",
    ).json()["id"]
    rank = {"namespace": "support", "now": "2030-01-01T00:00:00Z",
            "candidates": [{"object_id": oid, "similarity": 0.5}]}  # fmt: skip
    assert client_api.post("/api/v1/rank", rank, format="json").status_code == 200
    for path in (
        "/api/v1/ranking-state?namespace=support",
        "/api/v1/retrieval-quality?namespace=support",
        f"/api/v1/objects/{oid}/explain?as_of=2030-01-01T00:00:00Z",
    ):
        assert client_api.get(path).status_code == 200, path
    patch = {
        "retention_days": 30,
        "weights": {"similarity": 0.5, "confidence": 0.3, "hotness": 0.2},
    }
    resp = admin_api.patch("/api/v1/namespaces/support", patch, format="json")
    assert resp.status_code == 200 and resp.json()["retention_days"] == 30


# --- the dashboard pages of this round, as a client of another namespace ----------------------


@pytest.mark.parametrize("page", ["/objects/", "/alerts/", "/suppressed/", "/retrieval/"])
def test_pages_asked_for_another_namespace_are_404_like_an_unknown_one(page, support_world):
    outsider = make_client("olga", "client", ["billing"])[0].user
    c = Client()
    c.force_login(outsider)
    seen = c.get(f"{page}?namespace=support")
    assert seen.status_code == c.get(f"{page}?namespace=no-such-ns").status_code == 404
    assert SECRET not in seen.content.decode()
    own = c.get(page)
    assert own.status_code == 200 and SECRET not in own.content.decode()


def test_the_object_page_and_its_waterfall_of_another_namespace_are_404(support_world):
    outsider = make_client("olga", "client", ["billing"])[0].user
    c = Client()
    c.force_login(outsider)
    for query in ("", "?as_of=2030-01-01T00:00:00Z"):
        resp = c.get(f"/objects/{support_world[0]}/{query}")
        assert resp.status_code == 404 and SECRET not in resp.content.decode()


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_away_the_erasures_page_says_the_erasure_waits(admin_api, redis_down):
    admin = make_client("ada", "admin")[0].user
    c = Client()
    c.force_login(admin)
    form = {"namespace": "support", "kind": "actor", "subject": "alice", "reason": "Art. 17"}
    page = c.post("/erasures/request/", form, follow=True)
    assert page.status_code == 200
    assert "The task queue is unreachable" in page.content.decode()


# --- hostile input to this round's endpoints: a 4xx in the contract's shape, nothing written ---

BAD_GETS = [
    ("/api/v1/ranking-state?namespace=support&page_size=0", "page_size"),
    ("/api/v1/ranking-state?namespace=support&page_size=-1", "page_size"),
    ("/api/v1/ranking-state?namespace=support&page_size=99999999999999999999999", "page_size"),
    ("/api/v1/ranking-state?namespace=support&page_size=1e3", "page_size"),
    ("/api/v1/ranking-state?namespace=support&cursor=abc", "cursor"),
    ("/api/v1/ranking-state?namespace=support&cursor=" + "A" * 20000, "cursor"),
    ("/api/v1/suppressed?namespace=support&salience_below=nan", "salience_below"),
    ("/api/v1/suppressed?namespace=support&salience_below=inf", "salience_below"),
    ("/api/v1/suppressed?namespace=support&salience_below=-0.1", "salience_below"),
    ("/api/v1/suppressed?namespace=support&k=0", "k"),
    ("/api/v1/suppressed?namespace=support&k=99999999999999999999999999", "k"),
    ("/api/v1/suppressed?namespace=support&page_size=0", "page_size"),
    ("/api/v1/suppressed?namespace=support&page_size=100000000000000000000000", "page_size"),
    ("/api/v1/suppressed?namespace=support&cursor=zzz", "cursor"),
    ("/api/v1/suppressed?namespace=support&as_of=not-a-time", "as_of"),
    ("/api/v1/suppressed?namespace=support&as_of=9999-12-31T23:00:00-05:00", "as_of"),
    ("/api/v1/retrieval-quality?namespace=support&since=garbage", "since"),
    ("/api/v1/retrieval-quality?namespace=support&until=9999-12-31T23:00:00-05:00", "until"),
    (
        "/api/v1/retrieval-quality?namespace=support&since=2030-01-01T00:00:00Z"
        "&until=2020-01-01T00:00:00Z",
        "since",
    ),  # fmt: skip
    ("/api/v1/changes?namespace=support&types=object.ranking,no.such.type", "types"),
    ("/api/v1/suppressed", "namespace"),
    ("/api/v1/ranking-state", "namespace"),
]


@pytest.mark.parametrize("path, field", BAD_GETS)
def test_bad_query_parameters_of_this_rounds_reads_are_400(client_api, path, field):
    resp = client_api.get(path)
    assert resp.status_code == 400, resp.content[:300]
    error = resp.json()["error"]
    assert error["code"] == "validation_error" and field in error["fields"], error


def test_bad_explain_times_are_400_and_bad_ids_404(client_api):
    oid = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "fact", "epistemic_type": "ASSERTED"},
        format="json",
    ).json()["id"]
    for value in ("garbage", "9999-12-31T23:00:00-05:00", "2026-06-01T00:00:00%2B16:00"):
        resp = client_api.get(f"/api/v1/objects/{oid}/explain?as_of={value}")
        assert resp.status_code == 400 and "as_of" in resp.json()["error"]["fields"], value
    for bad in ("xyz", "0" * 300, str(uuid.uuid4())):
        resp = client_api.get(f"/api/v1/objects/{bad}/explain")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


RANK_BODIES = [
    ({"now": "garbage"}, "now"),
    ({"now": 12345}, "now"),
    ({"now": "0001-01-01T00:00:00+01:00"}, "now"),
    ({"now": "9999-12-31T23:59:59-05:00"}, "now"),
    ({"candidates": [{"object_id": "x", "similarity": 0.5}]}, "candidates.0.object_id"),
    (
        {"candidates": [{"object_id": str(uuid.UUID(int=1)), "similarity": 2}]},
        "candidates.0.similarity",
    ),  # fmt: skip
    (
        {"candidates": [{"object_id": str(uuid.UUID(int=1)), "similarity": 0.5}] * 1001},
        "candidates",
    ),  # fmt: skip
    ({"namespace": 5}, "namespace"),
    ({"namespace": "sup\x00port"}, "namespace"),
    ({"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize("extra, field", RANK_BODIES)
def test_bad_rank_bodies_are_400(client_api, extra, field):
    body = {"namespace": "support", "candidates": [], **extra}
    resp = client_api.post("/api/v1/rank", body, format="json")
    assert resp.status_code == 400, resp.content[:300]
    assert field in resp.json()["error"]["fields"], resp.json()


PATCHES = [
    ({"weights": {"similarity": True, "confidence": 0.3, "hotness": 0.2}}, "weights.similarity"),
    ({"weights": {"similarity": "0.5", "confidence": 0.3, "hotness": 0.2}}, "weights.similarity"),
    ({"weights": {"similarity": 2, "confidence": 0.3, "hotness": 0.2}}, "weights.similarity"),
    ({"weights": {"similarity": 0.5, "confidence": 0.3, "hotness": 0.2, "x": 1}}, "weights"),
    ({"weights": None}, "weights"),
    ({"retrieval": {"confidence_floor": -5}}, "retrieval.confidence_floor"),
    ({"retrieval": {"conditions": "x" * 10000}}, "retrieval.conditions"),
    ({"retrieval": [1, 2]}, "retrieval.non_field_errors"),
    ({"retention_days": 0}, "retention_days"),
    ({"retention_days": 10**30}, "retention_days"),
    ({"retention_days": 1.5}, "retention_days"),
    ({"retention_days": True}, "retention_days"),
    ({"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize("body, field", PATCHES)
def test_bad_namespace_patches_are_400_and_change_nothing(admin_api, body, field):
    from rms.models import Namespace, Operation

    before = (Namespace.objects.values().get(name="support"), Operation.objects.count())
    resp = admin_api.patch("/api/v1/namespaces/support", body, format="json")
    assert resp.status_code == 400, resp.content[:300]
    assert field in resp.json()["error"]["fields"], resp.json()
    assert (Namespace.objects.values().get(name="support"), Operation.objects.count()) == before


def test_a_confined_admin_gets_the_same_answer_for_anothers_namespace_and_none(admin_api):
    from erasure.models import Erasure

    make_namespace("billing")
    confined = as_api(make_client("confined", "admin", ["billing"])[1])
    answers = [
        confined.post(
            "/api/v1/erasures",
            {"subject": {"kind": "actor", "id": "a"}, "namespace": ns, "reason": "x"},
            format="json",
        )
        for ns in ("support", "no-such-ns")
    ]
    assert [a.status_code for a in answers] == [403, 403]
    assert answers[0].json()["error"]["message"].replace("support", "X") == answers[1].json()[
        "error"
    ]["message"].replace("no-such-ns", "X")
    theirs = admin_api.post(
        "/api/v1/erasures",
        {"subject": {"kind": "actor", "id": "a"}, "namespace": "support", "reason": "x"},
        format="json",
    ).json()["id"]
    assert confined.get(f"/api/v1/erasures/{theirs}").json() == (
        confined.get(f"/api/v1/erasures/{uuid.uuid4()}").json()
    )
    assert Erasure.objects.count() == 1
