"""The local score mirror (CLIENT.md "The retrieval side") against the live server: it answers
what ``POST /rank`` answers, to 1e-12, at the same feed position and clock, through signals,
sessions, penalties, sweeps, pins, deprecations and decay; its snapshot plus the feed is exact
under concurrent writers; it resumes from its state file; bad input is a clear error and the
mirror keeps its last good state."""

from __future__ import annotations

import base64
import random
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rms_client import RMSClient, RMSError, RMSValidationError

from feedback.sweep import sweep
from rms import policy
from tests.client.conftest import FAST
from tests.client.mirrors import SIGNALS, check_equal, new_objects, session
from tests.factories import make_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mirror_equals_rank_through_every_kind_of_change(live_server, seed):
    rng = random.Random(seed)
    admin = RMSClient(live_server.url, make_client(f"admin-{seed}", "admin")[1], **FAST)
    ns = f"ns{seed}"
    weights = {
        "similarity": rng.random(),
        "hotness": rng.random(),
        "utility": rng.random(),
        "confidence": rng.random(),
        "salience": rng.random(),
    }
    retrieval = {
        "confidence_floor": rng.choice([0.0, 0.3, 0.6]),
        "conditions": rng.choice(["met", "not_refuted", "any"]),
    }
    if seed == 3:
        weights = {"similarity": 0.45, "hotness": 0.30, "utility": 0.25}  # SPEC §12's own
    admin.create_namespace(ns, weights=weights, retrieval=retrieval)
    c = RMSClient(live_server.url, make_client(f"cl-{seed}", "client", [ns])[1], **FAST)
    ids = new_objects(c, ns, rng, 12)
    now = datetime.now(UTC)
    with c.mirror(ns) as mirror:
        assert len(mirror) == 12
        check_equal(mirror, c, ns, ids, now, rng)
        for step in range(6):
            for _ in range(4):
                c.record_session(session(ns, rng, ids))
            oid = rng.choice(ids)
            c.signal(oid, rng.choice(SIGNALS[:4]), session_id=f"alone-{step}")
            if step == 1:
                admin.pin(ids[0], "keep", confidence=0.8)
            if step == 2:
                admin.transition(ids[1], "DEPRECATED", "wrong")
                admin.unpin(ids[0], "no more")
            if step == 3:
                ids += new_objects(c, ns, rng, 3)
            if step == 4:
                for _ in range(6):
                    c.record_session(
                        {**session(ns, rng, ids[2:3]), "signals": [], "outcome": "FAILED"}
                    )
                sweep(namespace=ns)
            assert mirror.wait_until_current(timeout=30)
            for later in (0, 3, 40):  # decay and hotness at later clocks
                check_equal(mirror, c, ns, ids, now + timedelta(days=later), rng)
            now = datetime.now(UTC)
        # Every object's inputs as the snapshot has them now.
        fresh = c.ranking_state(ns, page_size=5000)["results"]
        for row in fresh:
            mine = mirror.get(row["object_id"])
            for key in ("confidence", "salience_base", "reinforcement_boost", "utility", "uses"):
                assert mine[key] == pytest.approx(row[key], abs=1e-12)
            assert mine["epistemic_type"] == row["epistemic_type"]
            assert mine["pinned"] is row["pinned"]


def test_snapshot_plus_feed_is_exact_under_concurrent_writers(live_server):
    rng = random.Random(7)
    admin = RMSClient(live_server.url, make_client("admin-c", "admin")[1], **FAST)
    admin.create_namespace("busy")
    c = RMSClient(live_server.url, make_client("cl-c", "client", ["busy"])[1], **FAST)
    ids = new_objects(c, "busy", rng, 60)
    stop = threading.Event()
    errors = []

    def write(seed):
        wr = random.Random(seed)
        with RMSClient(live_server.url, c.token, **FAST) as w:
            while not stop.is_set():
                try:
                    w.record_session(session("busy", wr, ids))
                    w.signal(wr.choice(ids), policy.CONFIRMED, session_id=f"w-{seed}")
                except RMSError as exc:  # pragma: no cover - reported below
                    errors.append(exc)

    writers = [threading.Thread(target=write, args=(s,)) for s in range(2)]
    for t in writers:
        t.start()
    try:
        # Small pages: the snapshot is read across many requests while the writers run.
        mirrors = [c.mirror("busy", page_size=7) for _ in range(2)]
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert not errors
    now = datetime.now(UTC)
    for mirror in mirrors:
        assert mirror.wait_until_current(timeout=60)
        check_equal(mirror, c, "busy", ids, now, rng)
        mirror.close()


def test_state_file_resumes_without_the_snapshot(live_server, tmp_path):
    rng = random.Random(11)
    admin = RMSClient(live_server.url, make_client("admin-p", "admin")[1], **FAST)
    admin.create_namespace("kept")
    c = RMSClient(live_server.url, make_client("cl-p", "client", ["kept"])[1], **FAST)
    ids = new_objects(c, "kept", rng, 8)
    path = tmp_path / "mirror.json"
    with c.mirror("kept", state_file=path) as mirror:
        c.record_session(session("kept", rng, ids))
        assert mirror.wait_until_current(timeout=30)
        cursor = mirror.cursor
    assert path.exists()
    c.record_session(session("kept", rng, ids))  # while the agent is down
    calls = []
    original = c.ranking_state
    c.ranking_state = lambda *a, **k: calls.append(a) or original(*a, **k)
    with c.mirror("kept", state_file=path) as again:
        assert again.cursor is not None
        assert len(again) == 8
        assert again.wait_until_current(timeout=30)
        assert again.cursor != cursor
        check_equal(again, c, "kept", ids, datetime.now(UTC), rng)
    assert calls == []  # resumed from the file, not the snapshot


def test_bad_inputs_are_clear_errors_and_the_mirror_keeps_its_state(live_server, tmp_path):
    rng = random.Random(5)
    admin = RMSClient(live_server.url, make_client("admin-b", "admin")[1], **FAST)
    admin.create_namespace("mine")
    admin.create_namespace("theirs")
    c = RMSClient(live_server.url, make_client("cl-b", "client", ["mine"])[1], **FAST)
    ids = new_objects(c, "mine", rng, 5)
    operator = RMSClient(live_server.url, make_client("op-b", "operator")[1], **FAST)
    with pytest.raises(RMSError) as unknown:
        operator.mirror("no-such-namespace")
    assert unknown.value.status == 404
    with pytest.raises(RMSError) as hidden:  # a client learns nothing of other namespaces
        c.mirror("no-such-namespace")
    assert hidden.value.status == 403
    with pytest.raises(RMSError) as other:
        c.mirror("theirs")
    assert other.value.status == 403
    # A tampered snapshot page cursor.
    page = c.ranking_state("mine", page_size=2)
    cursor = page["next_cursor"]
    tampered = cursor[:-3] + ("AAA" if cursor[-3:] != "AAA" else "BBB")
    with pytest.raises(RMSError) as bad:
        c.ranking_state("mine", cursor=tampered)
    assert bad.value.status == 400 and "cursor" in bad.value.fields
    # A page cursor of one namespace is refused in another.
    with pytest.raises(RMSError) as moved:
        operator.ranking_state("theirs", cursor=cursor)
    assert moved.value.status == 400
    # A feed cursor from another deployment (ahead of this log): the mirror stops with the
    # error and keeps answering from its last good state.
    path = tmp_path / "state.json"
    with c.mirror("mine", state_file=path) as mirror:
        assert mirror.wait_until_current(timeout=30)
        before = mirror.rank([(oid, 0.5) for oid in ids], now=datetime.now(UTC))
    import json

    state = json.loads(path.read_text())
    state["cursor"] = base64.urlsafe_b64encode(b"9000000000.99").decode().rstrip("=")
    path.write_text(json.dumps(state))
    with c.mirror("mine", state_file=path) as stale:
        with pytest.raises(RMSError) as foreign:
            stale.wait_until_current(timeout=10)
        assert foreign.value.status == 400
        assert "deployment" in foreign.value.fields["after"][0]
        later = stale.rank([(oid, 0.5) for oid in ids], now=datetime.now(UTC))
        assert [r["object_id"] for r in later] == [r["object_id"] for r in before]
    # A state file of another namespace is refused, never used.
    with pytest.raises(RMSValidationError):
        c.mirror("other", state_file=path)
    # A candidate the mirror does not hold, as /rank refuses one outside the namespace.
    with c.mirror("mine") as mirror, pytest.raises(RMSValidationError):
        mirror.rank([(str(uuid.uuid4()), 0.5)])
