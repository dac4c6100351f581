"""Feed cursors name the deployment that issued them (``rms.deployment``): the id is generated
once and stored, every cursor ``/changes`` and ``/ranking-state`` hand out carries it, a cursor
of another deployment is a 400 ``foreign_cursor`` in the contract's error shape, and a cursor
issued before deployments had an id is still accepted where it points."""

from __future__ import annotations

import base64
import importlib
import json
import re
import threading

import pytest
from django.apps import apps as django_apps
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedback.selectors import ranking_state
from rms import changes, deployment, events, store
from rms.models import Deployment, Namespace, Operation
from tests.factories import feed, follow

# The feed releases only rows whose transaction has finished: these tests commit for real.
pytestmark = pytest.mark.django_db(transaction=True)

OTHER = "0123456789abcdef"


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test reads the id from the database, and leaves no id of its own cached."""
    deployment.forget()
    yield
    deployment.forget()


def make_objects(api, n, namespace="support"):
    items = [{"namespace": namespace, "content": f"fact {i}", "epistemic_type": "ASSERTED"}
             for i in range(n)]  # fmt: skip
    response = api.post("/api/v1/objects", items, format="json")
    assert response.status_code == 201, response.content
    return [o["id"] for o in response.json()]


def issuer(cursor: str) -> str | None:
    return events.parse_cursor(cursor)[1]


def as_issued_by(cursor: str, issuer_id: str | None) -> str:
    """The same position as issued by ``issuer_id`` (None: before deployments had an id)."""
    return events.encode_cursor(events.decode_cursor(cursor), issuer_id)


def refused_as_foreign(response, field: str) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "foreign_cursor"
    assert "another deployment" in error["fields"][field][0]


def test_the_id_is_generated_once_stored_and_read_again_after_a_restart():
    Deployment.objects.all().delete()  # a database whose table was emptied
    first = deployment.current()
    assert re.fullmatch(r"[0-9a-f]{16}", first)
    assert Deployment.objects.get().deployment_id == first
    deployment.forget()  # a restarted process reads the stored one
    assert deployment.current() == first
    assert Deployment.objects.count() == 1


def test_the_migration_writes_the_id_and_keeps_an_existing_one():
    migration = importlib.import_module("rms.migrations.0010_deployment")
    Deployment.objects.all().delete()
    migration.create_id(django_apps, None)
    written = Deployment.objects.get().deployment_id
    assert re.fullmatch(r"[0-9a-f]{16}", written)
    migration.create_id(django_apps, None)  # a rerun changes nothing
    assert Deployment.objects.get().deployment_id == written
    assert deployment.current() == written


def test_processes_starting_together_agree_on_one_id():
    """Web processes creating the missing row at once: one row, the same id in each (each
    thread has its own database connection, as a process would)."""
    Deployment.objects.all().delete()
    barrier = threading.Barrier(4)
    seen, errors = [], []

    def start():
        try:
            barrier.wait()
            deployment.forget()
            seen.append(deployment.current())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(seen)) == 1 and len(seen) == 4
    assert Deployment.objects.get().deployment_id == seen[0]


def test_every_cursor_the_feed_hands_out_names_this_deployment(client_api):
    make_objects(client_api, 3)
    mine = deployment.current()
    found, last = follow(client_api)
    assert len(found) == 3
    assert {issuer(e["cursor"]) for e in found} == {mine}
    assert issuer(last) == mine
    assert issuer(feed(client_api, after="now")["next_cursor"]) == mine
    # Webhook bodies are the same events (``changes.read``), in both forms.
    assert {issuer(e["cursor"]) for e in changes.read(events.START).events} == {mine}
    texts = changes.read(events.START, as_json=True).events
    assert {issuer(json.loads(text)["cursor"]) for text in texts} == {mine}
    snapshot = ranking_state.ranking_state(Namespace.objects.get(name="support"), None)
    assert issuer(snapshot["feed_cursor"]) == mine


def test_a_cursor_of_another_deployment_is_refused_with_its_own_code(client_api):
    make_objects(client_api, 2)
    found, last = follow(client_api)
    for cursor in (found[0]["cursor"], last, events.encode_cursor(events.START, OTHER)):
        r = client_api.get("/api/v1/changes", {"after": as_issued_by(cursor, OTHER)})
        refused_as_foreign(r, "after")
    # With a long poll too: refused before it waits.
    r = client_api.get("/api/v1/changes", {"after": as_issued_by(last, OTHER), "wait": "5"})
    refused_as_foreign(r, "after")


def test_a_database_replaced_by_another_deployments_refuses_the_old_cursors(client_api):
    make_objects(client_api, 2)
    _, last = follow(client_api)
    assert feed(client_api, after=last)["results"] == []
    # The same URL now serves another deployment's database: its stored id differs.
    Deployment.objects.update(deployment_id=OTHER)
    deployment.forget()
    refused_as_foreign(client_api.get("/api/v1/changes", {"after": last}), "after")
    # Its own cursors are accepted.
    _, fresh = follow(client_api)
    assert issuer(fresh) == OTHER


def test_a_cursor_issued_before_deployment_ids_resumes_where_it_was(client_api):
    make_objects(client_api, 4)
    found, last = follow(client_api)
    for event in found[:3]:
        old = as_issued_by(event["cursor"], None)
        assert issuer(old) is None
        tagged = feed(client_api, after=event["cursor"])
        untagged = feed(client_api, after=old)
        assert [e["id"] for e in untagged["results"]] == [e["id"] for e in tagged["results"]]
        assert untagged["next_cursor"] == tagged["next_cursor"]  # answered with the id
    # An old cursor ahead of this log is still refused by the ahead-of-the-log check.
    ahead = events.encode_cursor(events.Position(2**40, 2**40))
    r = client_api.get("/api/v1/changes", {"after": ahead})
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize(
    "text",
    [
        b"1.2.0123456789ABCDEF",  # upper case
        b"1.2.0123456789abcde",  # 15 digits
        b"1.2.0123456789abcdef0",  # 17 digits
        b"1.2.",  # an empty id
        b"1.2.0123456789abcdef.3",
    ],
)
def test_a_malformed_deployment_id_is_a_validation_error(client_api, text):
    raw = base64.urlsafe_b64encode(text).decode().rstrip("=")
    r = client_api.get("/api/v1/changes", {"after": raw})
    assert r.status_code == 400, r.content
    assert r.json()["error"]["code"] == "validation_error"
    assert "after" in r.json()["error"]["fields"]


def test_ranking_state_page_cursors_of_another_deployment_are_refused(client_api):
    make_objects(client_api, 3)
    page = client_api.get("/api/v1/ranking-state", {"namespace": "support", "page_size": 1})
    assert page.status_code == 200, page.content
    body = page.json()
    assert issuer(body["feed_cursor"]) == deployment.current()
    after_id = body["results"][0]["object_id"]
    # Another deployment sharing this one's secret signs a page cursor this one would accept,
    # but the feed cursor inside names it.
    foreign = ranking_state.encode_page_cursor(
        "support", after_id, as_issued_by(body["feed_cursor"], OTHER)
    )
    r = client_api.get("/api/v1/ranking-state", {"namespace": "support", "cursor": foreign})
    refused_as_foreign(r, "cursor")
    # The page cursor it handed out, and one whose feed cursor predates the ids, go on.
    for cursor in (
        body["next_cursor"],
        ranking_state.encode_page_cursor(
            "support", after_id, as_issued_by(body["feed_cursor"], None)
        ),
    ):
        r = client_api.get("/api/v1/ranking-state", {"namespace": "support", "cursor": cursor})
        assert r.status_code == 200, r.content
        assert len(r.json()["results"]) == 2


# --- PostgreSQL writes each event's cursor: the same bytes as the reference encoding ----------

#: Positions whose texts ``txid.seq`` cover every length mod 3 (the suffix's encoding depends on
#: it) and the longest a cursor carries (20-digit transaction ids, 19-digit sequence numbers).
positions = st.builds(
    events.Position,
    txid=st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 9, 10, 99, 100, 2**63 - 1])),
    seq=st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 9, 10, 99, 100, 2**63 - 1])),
)
hex_ids = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


@pytest.mark.postgres
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(found=st.lists(positions, min_size=1, max_size=30), issuer_id=hex_ids)
def test_the_sql_cursor_is_the_reference_encoding_at_any_position(
    require_postgres, found, issuer_id
):
    """The per-page form (the suffix encoded once, per row only the position) and the per-row
    form give ``events.encode_cursor`` byte for byte, at any position, for any id."""
    from rms.store import pgfeed

    values = ", ".join(["(%s::text::xid8, %s::bigint)"] * len(found))
    params = [x for pos in found for x in (str(pos.txid), pos.seq)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {pgfeed.CURSOR_HEX_SQL}, {pgfeed.CURSOR_ANY_SQL}, {pgfeed.CURSOR_ANY_SQL} "
            f"FROM (VALUES {values}) AS t(txid, seq)",
            [*pgfeed.cursor_parts(issuer_id), f".{issuer_id}", "", *params],
        )
        rows = cursor.fetchall()
    assert [row[0] for row in rows] == [events.encode_cursor(p, issuer_id) for p in found]
    assert [row[1] for row in rows] == [events.encode_cursor(p, issuer_id) for p in found]
    assert [row[2] for row in rows] == [events.encode_cursor(p) for p in found]


def test_position_text_never_encodes_to_the_characters_url_safe_base64_replaces():
    """Why the per-row part needs no ``translate``: every 3-byte group of digits, '.' and hex
    digits encodes without '+' or '/' (so standard and URL-safe base64 agree on it)."""
    alphabet = b"0123456789.abcdef"
    groups = b"".join(bytes([a, b, c]) for a in alphabet for b in alphabet for c in alphabet)
    encoded = base64.b64encode(groups)
    assert b"+" not in encoded and b"/" not in encoded


@pytest.mark.postgres
def test_a_pages_cursors_are_the_reference_encoding(require_postgres, client_api):
    """Through the feed: events at positions of every text length mod 3 (transaction ids and
    sequence numbers of 1 to 19 digits) carry ``encode_cursor`` of their position, naming this
    deployment, in the JSON texts PostgreSQL writes and in the page's ``next_cursor``."""
    make_objects(client_api, 1)
    ids = [e["id"] for e in follow(client_api)[0]]
    template = Operation.objects.get(id=ids[0])
    below = store.get().release_bound()
    chosen = {}
    for digits in range(1, 20):
        seq = int("7" * digits)
        txid = min(int("3" * digits), below - 1)
        op = Operation.objects.create(
            seq=seq, ts=template.ts, op_type="PIN", target_type=template.target_type,
            target_id=template.target_id, namespace=template.namespace, actor_id="a",
            actor_type="SYSTEM_PROCESS", payload={}, state=template.state,
            prev_hash="0" * 64, hash="0" * 64,
        )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE rms_operation SET txid = %s::text::xid8 WHERE seq = %s", [str(txid), seq]
            )
        chosen[str(op.id)] = events.Position(txid, seq)
    mine = deployment.current()
    page = changes.read(events.START, limit=1000, as_json=True)
    found = {e["id"]: e["cursor"] for e in map(json.loads, page.events) if e["id"] in chosen}
    assert found == {i: events.encode_cursor(pos, mine) for i, pos in chosen.items()}
    body = feed(client_api, limit=1000)
    assert {e["id"]: e["cursor"] for e in body["results"] if e["id"] in chosen} == found
    assert body["next_cursor"] == events.encode_cursor(page.next, mine)
