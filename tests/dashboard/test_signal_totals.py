"""The per-signal totals a user sees, on the object page and in the aggregates export, are the
policy's list (``rms.policy.TOTAL_FIELDS``) with the object's counts: nothing hand-listed."""

from __future__ import annotations

import csv
import io

from rest_framework.test import APIClient

from feedback.models import FeedbackAggregate
from rms import policy
from tests.dashboard.conftest import login
from tests.factories import make_client


def test_object_page_lists_every_signal_total_of_the_policy(operator, history):
    # Object 1 got CORRECTED in the first session and the automatic UNUSED in the second.
    obj = history.objects[1]
    agg = FeedbackAggregate.objects.get(pk=obj.pk)
    page = login(operator).get(f"/objects/{obj.pk}/")
    assert page.status_code == 200
    lines = page.context["signal_totals"]
    assert sum(len(line.counts) for line in lines) == len(policy.TOTAL_FIELDS)
    assert [(line.label, line.counts, line.streak) for line in lines] == [
        ("Referenced · confirmed · task completed", (0, 0, 0), None),
        ("Corrected", (1,), None),
        ("Unused", (1,), 1),
    ]
    assert (agg.total_corrected, agg.total_unused, agg.unused_streak) == (1, 1, 1)
    html = page.content.decode()
    assert "<dt>Referenced · confirmed · task completed</dt><dd>0 · 0 · 0</dd>" in html
    assert "<dt>Corrected</dt><dd>1</dd>" in html
    assert '<dt>Unused</dt><dd>1 <span class="muted small">streak 1</span></dd>' in html


def test_aggregates_export_has_a_column_per_signal_total_of_the_policy(history):
    row, token = make_client("exporter", "operator")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    r = api.get("/api/v1/export/aggregates.csv?namespace=support")
    assert r.status_code == 200
    table = list(csv.reader(io.StringIO(b"".join(r.streaming_content).decode())))
    header = table[0]
    start = header.index("total_injections") + 1
    totals = list(policy.TOTAL_FIELDS.values())
    assert header[start : start + len(totals)] + [header[start + len(totals)]] == [
        *totals,
        "usage_ratio",
    ]
    by_id = {line[0]: line for line in table[1:]}
    for obj in history.objects:
        agg = FeedbackAggregate.objects.get(pk=obj.pk)
        cells = by_id[str(obj.pk)][start : start + len(totals)]
        assert cells == [str(getattr(agg, f)) for f in totals]
