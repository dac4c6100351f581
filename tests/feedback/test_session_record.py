"""A session row does not store its record: the answer is rebuilt from the session's
FEEDBACK_SESSION operation (``feedback.session_record``), the same record everywhere it is read
(the detail, a retried request, the export, the dashboard), on both databases; a row that stores
one (written before, or redacted by an erasure) answers with it."""

from __future__ import annotations

import csv
import io

import pytest
from django.db import connection
from django.test import Client

from feedback import session_record
from feedback.models import FeedbackSession
from tests.factories import make_client, make_objects, post, session

pytestmark = pytest.mark.django_db


def _stored_column(pk) -> object:
    with connection.cursor() as cursor:
        cursor.execute("SELECT record FROM feedback_feedbacksession WHERE id = %s", [pk.hex
                       if connection.vendor == "sqlite" else pk])  # fmt: skip
        return cursor.fetchone()[0]


def test_the_record_is_not_stored_and_every_reader_answers_the_same(client_api):
    a, b, c = make_objects(client_api)
    body = session(
        "r1", [(a, 100), (b, 50), (c, 10)], [(a, "CONFIRMED"), (b, "CORRECTED")],
        outcome="SUCCESS", context_tags=["billing"], context_text="a question",
    )  # fmt: skip
    created = post(client_api, body)
    assert created.status_code == 201
    record = created.json()
    row = FeedbackSession.objects.get(pk=record["id"])
    assert row.stored_record is None and _stored_column(row.pk) is None

    assert client_api.get(f"/api/v1/feedback-sessions/{record['id']}").json() == record
    assert list(FeedbackSession.objects.get(pk=record["id"]).record) == list(record)  # key order
    retried = post(client_api, body)
    assert (retried.status_code, retried.json()) == (200, record)
    batch = client_api.post("/api/v1/feedback-sessions/batch", [body], format="json").json()
    assert batch["results"] == [{"status": 200, "record": record}]

    exported = list(csv.reader(io.StringIO(
        b"".join(client_api.get("/api/v1/export/sessions.csv?namespace=support")).decode()
    )))  # fmt: skip
    assert [r[:3] for r in exported[1:]] == [[record["id"], "conv-r1", "r1"]]
    browser = Client()
    browser.force_login(make_client("ada-admin", "admin")[0].user)
    page = browser.get(f"/sessions/{record['id']}/")
    assert page.status_code == 200 and "CORRECTED" in page.content.decode()


def test_a_stored_record_is_the_answer_and_fill_reads_the_rest_in_one_query(
    client_api, django_assert_num_queries
):
    (a,) = make_objects(client_api, 1)
    first = post(client_api, session("r1", [(a, 10)])).json()
    second = post(client_api, session("r2", [(a, 10)], hours=2)).json()
    FeedbackSession.objects.filter(pk=first["id"]).update(stored_record={**first, "outcome": "X"})

    rows = list(FeedbackSession.objects.order_by("ts"))
    with django_assert_num_queries(1):
        session_record.fill(rows)
        records = [r.record for r in rows]
    assert records == [{**first, "outcome": "X"}, second]
