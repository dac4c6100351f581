"""The event tables read by the windowed metric sums are vacuumed after a fixed number of
inserts, not a fraction of their size (feedback migration 0012): their covering
indexes answer without the table only for vacuumed pages, and with the default 20 % the
unvacuumed tail, where every recent window lies, grew with the table."""

import pytest
from django.db import connection


@pytest.mark.postgres
@pytest.mark.django_db
def test_event_tables_vacuum_after_a_fixed_number_of_inserts():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname IN "
            "('feedback_injectionevent', 'feedback_sessionnamespace') ORDER BY relname"
        )
        rows = {name: sorted(options or []) for name, options in cursor.fetchall()}
    assert rows == {
        "feedback_injectionevent": [
            "autovacuum_vacuum_insert_scale_factor=0",
            "autovacuum_vacuum_insert_threshold=100000",
        ],
        "feedback_sessionnamespace": [
            "autovacuum_vacuum_insert_scale_factor=0",
            "autovacuum_vacuum_insert_threshold=10000",
        ],
    }
