"""Sorts on the aggregate's columns are read in two parts (``rms.selectors.NullsApart``: the
objects without a value by id, then the others by value and id, or the reverse when
descending): every slice equals the one-query order (``ORDER BY value NULLS FIRST, id``) on
random rows with ties, missing aggregates and null columns, for every registered sort, with and
without filters (on the object, and on the aggregate, which joins it); counts, ``Paginator``
and the API's offset pages read it the same way."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.core.paginator import Paginator
from django.db.models import F
from django.http import QueryDict

from dashboard.selectors import browser
from feedback.models import FeedbackAggregate
from feedback.selectors.object_filters import SORTS
from rms import selectors
from tests.factories import T0, make_object

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(admin_api, other_namespace):
    rng = random.Random(38)
    for n in range(40):
        obj = make_object(admin_api.row, content=f"fact {n}", confidence=rng.choice([0.3, 0.6]))
        if rng.random() < 0.3:
            continue  # never injected: no aggregate
        injections = rng.choice([0, 3, 3, 20])  # ties
        FeedbackAggregate.objects.create(
            object=obj,
            namespace=obj.namespace,
            total_injections=injections,
            total_token_cost=injections * 10,
            usage_ratio=rng.choice([0.0, 0.5, 0.5]) if injections else None,
            last_use_at=T0 + timedelta(days=rng.choice([1, 2])) if rng.random() < 0.6 else None,
        )
    make_object(admin_api.row, namespace="billing", content="other namespace")
    return admin_api


def reference(qs, path: str, descending: bool) -> list:
    """The one-query order the two parts must reproduce."""
    if descending:
        return list(qs.order_by(F(path).desc(nulls_last=True), "-id"))
    return list(qs.order_by(F(path).asc(nulls_first=True), "id"))


@pytest.mark.parametrize("key", sorted(SORTS))
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize(
    "extra", ["", "&confidence_min=0.5", "&usage_ratio_max=0.5", "&in_alert=false"]
)
def test_every_slice_equals_the_one_query_order(objects, key, descending, extra):
    params = QueryDict(f"namespace=support&sort={'-' if descending else ''}{key}{extra}")
    query, errors, listing = browser.browser_rows(objects.row, params)
    assert not errors and isinstance(listing, selectors.NullsApart)
    base = selectors.object_list(objects.row, query=query)
    expected = reference(base, SORTS[key], descending)
    n = len(expected)
    assert 3 < n <= 40 and listing.count() == n
    assert list(listing) == expected
    for start in range(0, n + 3, 3):
        for size in (1, 4, 7, 50):
            assert listing[start : start + size] == expected[start : start + size], (start, size)
    assert listing[n - 1] == expected[-1] and listing[n:] == [] and listing[5:5] == []
    pages = Paginator(listing, 7)
    assert [o for p in pages.page_range for o in pages.page(p).object_list] == expected


def test_the_api_pages_the_two_parts_in_order(objects):
    expected = reference(
        selectors.object_list(objects.row, namespace="support"), SORTS["usage_ratio"], False
    )
    got, url = [], "/api/v1/objects?namespace=support&sort=usage_ratio&page_size=6"
    while url:
        body = objects.get(url).json()
        got += [o["id"] for o in body["results"]]
        url = body["next"]
    assert got == [str(o.pk) for o in expected]
