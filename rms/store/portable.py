"""The portable store: Django's ORM for reads, Django's own value preparation for writes.

Any database Django supports (the tests and the development setup run it on SQLite). Reads are
one queryset each, in order; a lock is ``select_for_update`` in primary-key order (a no-op on
SQLite, where the IMMEDIATE transaction mode of the settings serialises writers instead).
Writes are ``executemany`` of plain statements with every value prepared by its field's
``get_db_prep_save``, exactly as ``Model.save`` would: already fast on SQLite, and the
reference the PostgreSQL store is tested against (``tests/rms/test_store_contract.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Count, F, Q, Subquery, Sum, Window
from django.db.models.functions import RowNumber

from rms.store import feed
from rms.store.base import MEMBERSHIP, Select, Store, insert_fields


def _queryset(select: Select):
    qs = select.model._default_manager.all()
    filters = {
        (f"{name}__in" if isinstance(value, MEMBERSHIP) else name): (
            list(value) if isinstance(value, set | frozenset) else value
        )
        for name, value in select.where.items()
    }
    if select.pairs:
        (a, b), pairs = select.pairs
        filters[f"{a}__in"] = {p[0] for p in pairs}
        filters[f"{b}__in"] = {p[1] for p in pairs}
    qs = qs.filter(**filters)
    if select.lock:
        qs = qs.order_by("pk").select_for_update(of=("self",))
    return qs


def _rows(select: Select) -> list:
    qs = _queryset(select)
    if select.pairs:
        # The two memberships above read a superset (every id with every session id): keep
        # the pairs asked for.
        (a, b), pairs = select.pairs
        wanted = set(pairs)
        found = list(qs)
        kept = [row for row in found if (getattr(row, a), getattr(row, b)) in wanted]
        if select.columns is None:
            return kept
        return [tuple(getattr(row, c) for c in select.columns) for row in kept]
    if select.columns is not None:
        return list(qs.values_list(*select.columns))
    return list(qs)


def _values(rows: Sequence, fields) -> list[list]:
    real = connections[DEFAULT_DB_ALIAS]  # not the proxy: one attribute lookup less a value
    prepare = [(f.attname, f.get_db_prep_save) for f in fields]
    return [[p(row.__dict__[name], real) for name, p in prepare] for row in rows]


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _update(model, fields, rows: list[list]) -> None:
    """UPDATE ``fields`` from prepared rows (primary key first)."""
    pk = model._meta.pk
    assignments = ", ".join(f"{_q(f.column)} = %s" for f in fields)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {_q(model._meta.db_table)} SET {assignments} WHERE {_q(pk.column)} = %s",
            [row[1:] + row[:1] for row in rows],
        )


class PortableStore(Store):
    # SQLite: correlate on the key alone (see Store.bounded_semi_join).
    bounded_semi_join = False
    vendor = "portable"

    def read(self, selects: Sequence[Select]) -> list[list]:
        return [_rows(s) for s in selects]

    def insert(self, model, rows: Sequence) -> None:
        if not rows:
            return
        fields = insert_fields(model)
        columns = ", ".join(_q(f.column) for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {_q(model._meta.db_table)} ({columns}) VALUES ({marks})",
                _values(rows, fields),
            )

    def update(self, model, rows: Sequence, field_names: Sequence[str]) -> None:
        if not rows:
            return
        meta = model._meta
        fields = [meta.get_field(name) for name in field_names]
        _update(model, fields, _values(rows, [meta.pk, *fields]))

    def update_values(self, model, field_names: Sequence[str], rows: Sequence[Sequence]) -> None:
        if not rows:
            return
        meta = model._meta
        fields = [meta.pk, *(meta.get_field(name) for name in field_names)]
        real = connections[DEFAULT_DB_ALIAS]
        prepared = [
            [f.get_db_prep_save(v, real) for f, v in zip(fields, row, strict=True)] for row in rows
        ]
        _update(model, fields[1:], prepared)

    def newest_per_key(self, model, key, limits, value, order):
        out: dict = {}
        if not limits:
            return out
        rows = (
            model.objects.filter(**{f"{key}__in": list(limits)})
            .annotate(
                _rn=Window(
                    RowNumber(),
                    partition_by=[F(key)],
                    order_by=[F(order[0]).desc(), F(order[1]).desc()],
                )
            )
            .filter(_rn__lte=max(limits.values()))
            .order_by(key, "_rn")
            .values_list(key, value)
        )
        for k, v in rows:
            found = out.setdefault(k, [])
            if len(found) < limits[k]:
                found.append(str(v))
        return out

    def injection_window_sums(self, injections, wasteful_objects):
        rows = (
            injections.values("namespace_id")
            .annotate(
                # COUNT(*) and COUNT(namespace_id), not COUNT(id): the id is in no index, so
                # counting it would read the table instead of a covering (namespace, ts) index.
                n=Count("*"),
                unused=Count("namespace", filter=Q(ended_unused=True)),
                wasted=Sum("token_cost", filter=Q(object_id__in=Subquery(wasteful_objects))),
            )
            .order_by()
        )
        return {r["namespace_id"]: r for r in rows}

    def release_bound(self) -> int:
        return feed.release_bound()

    def state_changes(self, beyond, namespaces=None, before=None, limit=None):
        return feed.state_changes("seq", beyond, namespaces, before, limit)

    def change_rows(
        self, after, *, below, limit, op_types, namespaces, as_json=False, deployment=None
    ):
        return feed.rows(
            after,
            below=below,
            limit=limit,
            op_types=op_types,
            namespaces=namespaces,
            deployment=deployment,
        )

    def change_head(self, below):
        return feed.head(below)

    def position_issued(self, after, below) -> bool:
        # Positions here are (0, seq) with seq of a committed row (below the bound).
        return after.txid == 0 and after.seq < below
