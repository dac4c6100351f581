"""The score mirror resumed from what it kept, against the live server: a feed cursor another
deployment issued (a state file kept across a database replaced by another deployment's, or
handed to the feed directly) is a clear ``foreign_cursor`` error and the mirror keeps its last
good state until ``refresh()``; a cursor from before deployment ids is still followed; and a
state file written before the profile event existed follows the current types, so a profile
change re-scores the mirror without ``refresh()``."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
import rms_client.mirror as mirror_module
from rms_client import RMSClient, RMSError

from rms import deployment, events
from rms.models import Deployment
from tests.client.conftest import FAST
from tests.client.mirrors import check_equal, new_objects, session
from tests.factories import make_client

pytestmark = pytest.mark.django_db(transaction=True)

OTHER = "fedcba9876543210"
#: What a mirror's state file named before ``namespace.profile_changed`` and ``object.erased``.
OLD_TYPES = [
    "object.created", "object.reinforced", "object.penalized", "object.pinned",
    "object.unpinned", "object.transitioned", "object.deprecated", "object.condition_changed",
    "object.ranking",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_cache():
    deployment.forget()
    yield
    deployment.forget()


def setup(live_server, name, n=8, seed=0, **namespace):
    rng = random.Random(seed)
    admin = RMSClient(live_server.url, make_client(f"admin-{name}", "admin")[1], **FAST)
    admin.create_namespace(name, **namespace)
    c = RMSClient(live_server.url, make_client(f"cl-{name}", "client", [name])[1], **FAST)
    return admin, c, new_objects(c, name, rng, n), rng


def replace_the_database_by_another_deployments():
    """The server's database now holds another deployment's id (what a fresh database, or
    another deployment's restored at the same URL, looks like to a consumer)."""
    Deployment.objects.update(deployment_id=OTHER)
    deployment.forget()


def issuer(cursor):
    return events.parse_cursor(cursor)[1]


def test_a_state_file_of_another_deployment_is_a_clear_error_and_the_state_is_kept(
    live_server, tmp_path
):
    _, c, ids, rng = setup(live_server, "kept", seed=1)
    path = tmp_path / "mirror.json"
    with c.mirror("kept", state_file=path) as mirror:
        c.record_session(session("kept", rng, ids))
        assert mirror.wait_until_current(timeout=30)
        now = datetime.now(UTC)
        good = check_equal(mirror, c, "kept", ids, now, random.Random(1))
    saved = json.loads(path.read_text())
    assert issuer(saved["cursor"]) == deployment.current()

    replace_the_database_by_another_deployments()
    with c.mirror("kept", state_file=path) as again:
        with pytest.raises(RMSError) as refused:
            again.wait_until_current(timeout=30)
        err = refused.value
        assert (err.status, err.code) == (400, "foreign_cursor")
        assert "another deployment" in err.fields["after"][0]
        assert str(path) in err.message and "refresh()" in err.message
        assert again.error is err
        # The last good state answers, exactly as before.
        pairs = [(r["object_id"], 0.0) for r in good]
        assert [r["object_id"] for r in again.rank(pairs, now=now)] == [
            r["object_id"] for r in mirror.rank(pairs, now=now)
        ]
        assert again.cursor == saved["cursor"]
        with pytest.raises(RMSError):  # it stays stopped, saying why
            again.wait_until_current(timeout=5)
    assert json.loads(path.read_text())["cursor"] == saved["cursor"]  # the file is kept

    # refresh() starts again from this deployment's snapshot, and the thread follows again.
    with c.mirror("kept", state_file=path) as again:
        with pytest.raises(RMSError):
            again.wait_until_current(timeout=30)
        again.refresh()
        assert again.error is None and issuer(again.cursor) == OTHER
        c.record_session(session("kept", rng, ids))
        assert again.wait_until_current(timeout=30)
        check_equal(again, c, "kept", ids, datetime.now(UTC), random.Random(2))


def test_a_mirror_whose_server_database_is_replaced_stops_with_the_error(live_server):
    _, c, ids, rng = setup(live_server, "live", seed=2)
    # Not started: ``wait_until_current`` does every read, so none is in flight across the
    # replacement (a request that read the old id and answers with the new one).
    with c.mirror("live", start=False) as mirror:
        assert mirror.wait_until_current(timeout=30)
        held, before = mirror.cursor, mirror.get(ids[0])
        replace_the_database_by_another_deployments()
        c.record_session(session("live", rng, ids))
        with pytest.raises(RMSError) as refused:
            mirror.wait_until_current(timeout=30)
        assert refused.value.code == "foreign_cursor"
        assert mirror.error is refused.value
        assert (mirror.cursor, mirror.get(ids[0])) == (held, before)
    # An explicit cursor of the old deployment, handed to the feed, is the same error.
    with pytest.raises(RMSError) as direct:
        c.changes_page(namespace="live", after=held)
    assert (direct.value.status, direct.value.code) == (400, "foreign_cursor")
    assert "after" in direct.value.fields


def test_a_cursor_from_before_deployment_ids_is_still_followed(live_server, tmp_path):
    _, c, ids, rng = setup(live_server, "older", seed=3)
    path = tmp_path / "mirror.json"
    with c.mirror("older", state_file=path) as mirror:
        assert mirror.wait_until_current(timeout=30)
    state = json.loads(path.read_text())
    state["cursor"] = events.encode_cursor(events.decode_cursor(state["cursor"]))  # no id
    assert issuer(state["cursor"]) is None
    path.write_text(json.dumps(state))
    c.record_session(session("older", rng, ids))
    with c.mirror("older", state_file=path) as again:
        assert again.wait_until_current(timeout=30)
        assert issuer(again.cursor) == deployment.current()
        check_equal(again, c, "older", ids, datetime.now(UTC), random.Random(3))


def old_state_file(c, name, path):
    """A state file as a mirror wrote it before the profile event existed."""
    with c.mirror(name, state_file=path) as mirror:
        assert mirror.wait_until_current(timeout=30)
    state = json.loads(path.read_text())
    state["event_types"] = OLD_TYPES
    path.write_text(json.dumps(state))


def test_a_state_file_from_before_the_profile_event_follows_profile_changes(live_server, tmp_path):
    weights = {"similarity": 0.45, "hotness": 0.30, "utility": 0.25}
    admin, c, ids, rng = setup(live_server, "tuned", n=12, seed=4, weights=weights)
    for _ in range(5):
        c.record_session(session("tuned", rng, ids))
    path = tmp_path / "mirror.json"
    old_state_file(c, "tuned", path)
    now = datetime.now(UTC)
    refreshes = []
    with c.mirror("tuned", state_file=path) as again:
        again.refresh = lambda: refreshes.append(1)  # must not be needed
        assert "namespace.profile_changed" in again.event_types
        before = check_equal(again, c, "tuned", ids, now, random.Random(4))
        new = {"similarity": 0.1, "hotness": 0.1, "utility": 0.1, "confidence": 0.5,
               "salience": 0.2}  # fmt: skip
        rules = {"confidence_floor": 0.5, "conditions": "met"}
        admin.update_namespace("tuned", weights=new, retrieval=rules)
        assert again.wait_until_current(timeout=30)
        assert again.profile == {"weights": new, **rules}
        for later in (0, 4):
            after = check_equal(again, c, "tuned", ids, now + timedelta(days=later),
                                random.Random(4))  # fmt: skip
        moved = {r["object_id"]: r["score"] for r in before}
        assert any(abs(moved[r["object_id"]] - r["score"]) > 1e-6 for r in after)
    assert refreshes == []
    assert "namespace.profile_changed" in json.loads(path.read_text())["event_types"]


def test_a_server_that_refuses_a_type_the_code_knows_is_followed_with_the_recorded_ones(
    live_server, tmp_path, monkeypatch
):
    """A server older than the client: the types the state file recorded still work."""
    _, c, ids, rng = setup(live_server, "skew", seed=5)
    path = tmp_path / "mirror.json"
    old_state_file(c, "skew", path)
    future = (*mirror_module.MIRROR_TYPES, "object.from_the_future")
    monkeypatch.setattr(mirror_module, "MIRROR_TYPES", future)
    c.record_session(session("skew", rng, ids))
    with c.mirror("skew", state_file=path) as again:
        assert "object.from_the_future" in again.event_types
        assert again.wait_until_current(timeout=30)
        assert again.error is None
        assert list(again.event_types) == OLD_TYPES
        check_equal(again, c, "skew", ids, datetime.now(UTC), random.Random(5))


def test_a_store_sync_whose_stored_cursor_is_another_deployments_stops_clearly(live_server):
    """``RMSStore.sync`` keeps its feed cursor in the wrapped store: one kept across a replaced
    database is the same clear error, and the store keeps its cursor and items."""
    from langgraph.store.memory import InMemoryStore
    from rms_client.integrations.langgraph import RMSStore

    _, c, ids, _ = setup(live_server, "synced", seed=6)
    with c.mirror("synced") as mirror:
        store = RMSStore(inner=InMemoryStore(), mirror=mirror)
        store.put(("docs",), "a", {"text": "fact", "rms_object_id": ids[0]})
        assert store.sync(c, namespace="synced", once=True) > 0
        held = store.load_cursor("synced")
        replace_the_database_by_another_deployments()
        with pytest.raises(RMSError) as refused:
            store.sync(c, namespace="synced", once=True)
        assert (refused.value.status, refused.value.code) == (400, "foreign_cursor")
        assert store.load_cursor("synced") == held
        assert store.get(("docs",), "a").value["rms_object_id"] == ids[0]
