"""The Retention page (admin): settings per namespace, the archive's size and last pass."""

from __future__ import annotations

from datetime import timedelta

import pytest

from feedback import retention
from rms.models import Namespace
from tests.dashboard.conftest import login
from tests.factories import T0, make_client, make_objects, post, session

pytestmark = pytest.mark.django_db


def test_only_admins_see_and_set_retention(admin, operator, client_user):
    assert login(operator).get("/retention/").status_code == 403
    assert login(client_user).get("/retention/").status_code == 403
    body = {"namespace": "support", "retention_days": "30"}
    assert login(operator).post("/retention/set/", body).status_code == 403
    assert Namespace.objects.get(name="support").retention_days is None
    assert 'href="/retention/"' in login(admin).get("/").content.decode()
    assert 'href="/retention/"' not in login(operator).get("/").content.decode()
    c = login(admin)
    assert c.post("/retention/set/", body).status_code == 302
    assert Namespace.objects.get(name="support").retention_days == 30
    page = c.get("/retention/", follow=True).content.decode()
    assert "30 days" in page
    for bad in ("-3", "0", "abc", "99999"):
        c.post("/retention/set/", {"namespace": "support", "retention_days": bad})
        assert Namespace.objects.get(name="support").retention_days == 30, bad
    c.post("/retention/set/", {"namespace": "support", "retention_days": ""})
    assert Namespace.objects.get(name="support").retention_days is None


def test_the_page_shows_the_archive_size_and_last_pass(admin, tmp_path, settings):
    from rest_framework.test import APIClient

    settings.RMS_ARCHIVE_URL = str(tmp_path / "archive")
    row, token = make_client("writer", "client", ["support"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    ids = make_objects(api, 2)
    for k in range(5):
        body = session(f"p-{k}", [(oid, 10) for oid in ids], hours=k + 1)
        assert post(api, body).status_code == 201
    ns = Namespace.objects.get(name="support")
    ns.retention_days = 1
    ns.save()
    done = retention.run_namespace(ns, T0 + timedelta(days=2))
    assert done["operations"] > 0
    page = login(admin).get("/retention/").content.decode()
    size = sum(p.stat().st_size for p in (tmp_path / "archive" / "support").glob("0*"))
    assert f'data-archive-bytes="{size}"' in page
    assert f"{done['operations']} operations" in page
