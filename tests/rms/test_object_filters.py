"""``GET /objects`` filters, sorts and pages (confidence and usage-ratio ranges, in_alert, text,
sort with offset pages), scoped by namespace, with real rows on either database."""

from __future__ import annotations

import pytest

from feedback.models import FeedbackAggregate
from rms.models import MemoryObject
from tests.factories import make_object

pytestmark = pytest.mark.django_db

# content, type, confidence, (injections, usage ratio) or None for never injected
ROWS = [
    ("alpha refund policy", "ASSERTED", 0.70, (30, 0.05)),  # in the review queue
    ("beta Refund window", "OBSERVED", 0.90, (30, 0.50)),
    ("gamma shipping", "INFERRED", 0.40, (10, 0.00)),  # too few injections for the queue
    ("delta pricing", "UNVERIFIED", 0.20, None),
    ("epsilon refund deprecated", "ASSERTED", 0.60, (40, 0.02)),  # deprecated below
]


@pytest.fixture
def rows(admin_api, other_namespace):
    ids = {}
    for content, etype, conf, agg in ROWS:
        obj = make_object(admin_api.row, content=content, epistemic_type=etype, confidence=conf)
        ids[content.split()[0]] = str(obj.pk)
        if agg:
            injections, ratio = agg
            FeedbackAggregate.objects.create(
                object=obj,
                namespace=obj.namespace,
                total_injections=injections,
                usage_ratio=ratio,
                total_token_cost=injections * 10,
            )
    MemoryObject.objects.filter(pk=ids["epsilon"]).update(epistemic_type="DEPRECATED")
    make_object(admin_api.row, namespace="billing", content="refund in billing", confidence=0.7)
    return ids


def names(api, query: str, rows) -> list[str]:
    r = api.get(f"/api/v1/objects?namespace=support&{query}")
    assert r.status_code == 200, r.content
    by_id = {v: k for k, v in rows.items()}
    return [by_id[o["id"]] for o in r.json()["results"]]


def test_confidence_range_and_sort(admin_api, rows):
    got = names(admin_api, "confidence_min=0.4&confidence_max=0.7&sort=-confidence", rows)
    assert got == ["alpha", "epsilon", "gamma"]
    assert names(admin_api, "sort=confidence", rows) == [
        "delta",
        "gamma",
        "epsilon",
        "alpha",
        "beta",
    ]


def test_usage_ratio_range_leaves_out_never_injected(admin_api, rows):
    assert names(admin_api, "usage_ratio_max=0.05&sort=usage_ratio", rows) == [
        "gamma",
        "epsilon",
        "alpha",
    ]
    assert names(admin_api, "usage_ratio_min=0.1", rows) == ["beta"]
    # Never injected sorts as the smallest usage ratio.
    assert names(admin_api, "sort=usage_ratio", rows)[0] == "delta"


def test_in_alert_is_the_review_queue(admin_api, rows):
    assert names(admin_api, "in_alert=true", rows) == ["alpha"]
    assert sorted(names(admin_api, "in_alert=false", rows)) == [
        "beta",
        "delta",
        "epsilon",
        "gamma",
    ]


def test_text_search_is_case_insensitive(admin_api, rows):
    assert sorted(names(admin_api, "q=REFUND", rows)) == ["alpha", "beta", "epsilon"]
    assert names(admin_api, "q=refund&epistemic_type=OBSERVED&pinned=false", rows) == ["beta"]


def test_sorted_pages_follow_the_offset_cursor(admin_api, rows):
    r = admin_api.get("/api/v1/objects?namespace=support&sort=-injections&page_size=2")
    first = r.json()
    assert len(first["results"]) == 2 and first["next"]
    second = admin_api.get(first["next"]).json()
    third = admin_api.get(second["next"]).json()
    assert third["next"] is None
    got = [o["id"] for o in first["results"] + second["results"] + third["results"]]
    by_id = {v: k for k, v in rows.items()}
    # Injections 40, 30, 30, 10, none; ties by id descending.
    tie = sorted([rows["alpha"], rows["beta"]], reverse=True)
    assert got == [rows["epsilon"], *tie, rows["gamma"], rows["delta"]], [by_id[i] for i in got]


@pytest.mark.parametrize(
    "query, field",
    [
        ("confidence_min=1.5", "confidence_min"),
        ("confidence_min=abc", "confidence_min"),
        ("usage_ratio_max=nan", "usage_ratio_max"),
        ("confidence_min=0.8&confidence_max=0.2", "confidence_min"),
        ("in_alert=yes", "in_alert"),
        ("sort=content", "sort"),
        ("q=" + "x" * 201, "q"),
    ],
)
def test_bad_filters_are_400(admin_api, rows, query, field):
    r = admin_api.get(f"/api/v1/objects?{query}")
    assert r.status_code == 400
    assert field in r.json()["error"]["fields"]


def test_filters_stay_in_the_callers_namespaces(outsider_api, rows):
    r = outsider_api.get("/api/v1/objects?q=refund&sort=-confidence")
    assert [o["content"] for o in r.json()["results"]] == ["refund in billing"]
    assert outsider_api.get("/api/v1/objects?namespace=support&q=refund").status_code == 403
