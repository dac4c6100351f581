"""The object listings' text search (``q``) on PostgreSQL is served by the trigram index
migration ``rms/0010`` creates (``rms.store.search``); on SQLite the migration does nothing and
the search is the same ``icontains``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.http import QueryDict

from dashboard.selectors import browser
from rms.store.search import CONTENT_TRIGRAM_INDEX
from tests.factories import make_object

pytestmark = pytest.mark.django_db

CONTENTS = ["Refunds take five days", "the REFUND window", "shipping to Oslo", "refunded twice"]


def indexes() -> set[str]:
    with connection.cursor() as cursor:
        return {
            i["name"] if isinstance(i, dict) else i
            for i in connection.introspection.get_constraints(cursor, "rms_memoryobject")
        }


def test_the_text_search_finds_substrings_whatever_the_case(admin_api):
    for content in CONTENTS:
        make_object(admin_api.row, content=content)
    _, _, qs = browser.browser_rows(admin_api.row, QueryDict("namespace=support&q=rEfUnD"))
    assert sorted(o.content for o in qs) == sorted(c for c in CONTENTS if "refund" in c.lower())
    assert (CONTENT_TRIGRAM_INDEX in indexes()) == (connection.vendor == "postgresql")


@pytest.mark.postgres
def test_postgresql_answers_the_text_search_from_the_trigram_index(require_postgres, admin_api):
    for n in range(200):
        make_object(admin_api.row, content=f"memory {n} about {'refunds' if n % 50 else 'tax'}")
    # Every namespace (an admin's listing): the text is the listing's one condition.
    _, _, qs = browser.browser_rows(admin_api.row, QueryDict("q=tax"))
    # The page count's query (the listing's filters, no order).
    sql, params = qs.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE rms_memoryobject")
        # A table this small is cheaper to scan: forbid the scan to show the index serves it.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert f"Bitmap Index Scan on {CONTENT_TRIGRAM_INDEX}" in plan, plan
    assert len(list(qs)) == 4
