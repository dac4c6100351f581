"""rms.store.pgfetch on PostgreSQL: rows read with plain SQL equal what the ORM reads."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rms.models import MemoryObject
from rms.store import pgfetch as fetch
from tests.factories import make_object

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]  # the PostgreSQL store's reads


def test_timestamps_read_with_the_c_loader_equal_django_s(require_postgres, client_api):
    obj = make_object(client_api.row)
    MemoryObject.objects.filter(pk=obj.pk).update(
        created_at=datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC)
    )
    orm = MemoryObject.objects.get(pk=obj.pk)
    (built,) = fetch.Select(MemoryObject, "o", "o.id = %s", [obj.pk]).run()
    for name in ("created_at", "last_op_ts"):
        mine, django = getattr(built, name), getattr(orm, name)
        assert mine == django and mine.isoformat() == django.isoformat()
        assert mine.tzinfo is django.tzinfo  # datetime.timezone.utc, as Django's loader gives
    assert built.created_at == datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC)


def test_pipelined_queries_use_the_same_loader(require_postgres, client_api):
    obj = make_object(client_api.row)
    query = ("SELECT created_at FROM rms_memoryobject WHERE id = %s", [obj.pk])
    (found,) = fetch.pipelined([query])
    assert found == [(MemoryObject.objects.get(pk=obj.pk).created_at,)]
