"""rms.store.pgarrays: arrays encoded by hand read back in PostgreSQL exactly as psycopg's own."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rms.store import pgarrays

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]  # binary arrays are PostgreSQL's

_aware = st.datetimes(
    min_value=datetime(1900, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
    max_value=datetime(2900, 1, 1),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)
# PostgreSQL text holds no NUL, and UTF-8 no lone surrogate (the API refuses both with a 400).
_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
_columns = st.one_of(
    st.tuples(st.just("text"), st.lists(st.none() | _text, max_size=8)),
    st.tuples(st.just("uuid"), st.lists(st.none() | st.uuids(), max_size=8)),
    st.tuples(st.just("float8"), st.lists(st.none() | st.floats(allow_nan=False), max_size=8)),
    st.tuples(st.just("int8"), st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=8)),
    st.tuples(st.just("bool"), st.lists(st.none() | st.booleans(), max_size=8)),
    st.tuples(st.just("timestamptz"), st.lists(st.none() | _aware, max_size=8)),
)


def cursor() -> psycopg.Cursor:
    connection.ensure_connection()
    cur = psycopg.Cursor(connection.connection)
    pgarrays.register(cur)
    return cur


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=_columns)
def test_encoded_arrays_read_back_as_psycopg_s(require_postgres, column):
    kind, values = column
    with cursor() as cur:
        ours = cur.execute(f"SELECT %b::{kind}[]", [pgarrays.encode(values)]).fetchone()[0]
        theirs = cur.execute(f"SELECT %b::{kind}[]", [values]).fetchone()[0]
    assert ours == theirs == values


def test_what_is_not_one_plain_type_is_left_to_psycopg(require_postgres):
    times = [datetime(2026, 1, 1, tzinfo=UTC)]
    for values in ([], [None], [1, 0.5], times, [2**64], [True, 1]):
        assert pgarrays.encode(values) is values
    assert type(pgarrays.encode([uuid.uuid4(), None])) is pgarrays.UuidArray
    with cursor() as cur:  # a text array casts to the column's type, as COPY's text would
        ids = [str(uuid.uuid4())]
        back = cur.execute("SELECT %b::uuid[]", [pgarrays.encode(ids)]).fetchone()[0]
        assert back == [uuid.UUID(ids[0])]
