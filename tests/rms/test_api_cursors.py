"""Every cursor-taking endpoint answers a forged cursor — a huge or negative number, a time out of
range — with a 400 in the error shape, never a 500 (``bigint out of range`` on PostgreSQL, an
integer overflow on SQLite)."""

from __future__ import annotations

import base64
import uuid

import pytest

from delivery.models import WebhookEndpoint
from rms.api.pagination import encode_cursor
from tests.factories import make_object

HUGE = 2**70
ID = str(uuid.uuid4())


def _bad(resp, field: str = "cursor") -> None:
    assert resp.status_code == 400, resp.content
    body = resp.json()
    assert body["error"]["code"] == "validation_error"
    assert field in body["error"]["fields"]


@pytest.mark.parametrize(
    "value", [[HUGE], [-1], [2**63], [HUGE, "2026-06-01T00:00:00+00:00"], [-5, "2026-06-01"]]
)
def test_object_operations_cursor_with_a_huge_or_negative_seq_is_400(client_api, value):
    obj = make_object(client_api.row)
    _bad(client_api.get(f"/api/v1/objects/{obj.pk}/operations?cursor={encode_cursor(value)}"))


@pytest.mark.parametrize("value", [[HUGE], [2**63], [2**31], [-1], [-(2**70)]])
def test_review_queue_cursor_with_a_huge_or_negative_offset_is_400(operator_api, value):
    _bad(operator_api.get(f"/api/v1/review-queue?namespace=support&cursor={encode_cursor(value)}"))


OUT_OF_RANGE_TIMES = [
    "9999-12-31T23:00:00-10:00",  # past year 9999 in UTC
    "0001-01-01T00:00:00+10:00",  # before year 1 in UTC
    "2026-06-01T00:00:00+20:00",  # an offset PostgreSQL refuses
    HUGE,
    -1,
]


@pytest.mark.parametrize("when", OUT_OF_RANGE_TIMES)
@pytest.mark.parametrize(
    ("persona", "path"),
    [
        ("client_api", "/api/v1/objects"),
        ("operator_api", "/api/v1/tasks"),
        ("operator_api", "/api/v1/alerts"),
    ],
)
def test_time_keyed_cursor_out_of_range_is_400(request, persona, path, when):
    api = request.getfixturevalue(persona)
    _bad(api.get(f"{path}?cursor={encode_cursor([when, ID])}"))


@pytest.mark.parametrize("when", OUT_OF_RANGE_TIMES)
def test_webhook_deliveries_cursor_out_of_range_is_400(admin_api, when):
    endpoint = WebhookEndpoint.objects.create(
        url="https://hooks.example/rms", secret="s" * 32, created_by="admin-1"
    )
    path = f"/api/v1/webhooks/{endpoint.pk}/deliveries"
    _bad(admin_api.get(f"{path}?cursor={encode_cursor([when, ID])}"))


@pytest.mark.parametrize("after", [f"{HUGE}.1", f"1.{HUGE}", f"{2**63}.0", "-1.5", "1.-5"])
def test_change_feed_cursor_huge_or_negative_is_400(client_api, after):
    raw = base64.urlsafe_b64encode(after.encode()).decode().rstrip("=")
    _bad(client_api.get(f"/api/v1/changes?after={raw}"), "after")
