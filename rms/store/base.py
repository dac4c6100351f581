"""What the domain asks of the database (the interface of ``rms.store``), in plain terms.

Reads are :class:`Select` descriptions (a model, equality and membership filters, optionally a
set of key pairs, the columns wanted, whether to lock), run together by :meth:`Store.read`:
PostgreSQL sends them in one round trip, the portable store one query each, in order. A lock is
taken in primary-key order (STYLE §4, SPEC §6: two writers touching overlapping sets acquire
their locks in the same order and cannot deadlock).

Writes take rows: model instances, or dataclasses with the model's attribute names. A row class
may name, in ``JSON_TEXTS``, the attribute holding a JSON column's already-encoded text (an
operation's payload, hashed from that very text, ``rms.oplog.OpRow``): the PostgreSQL store
sends it as it is instead of encoding the value again. Rows keep their list order, so an
auto-increment column (``Operation.seq``) numbers them in that order.
"""

from __future__ import annotations

import contextlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.db.models import F

from rms.events import FeedRow, Position
from rms.models import MemoryObject, Namespace

#: Values of a membership filter (``where={"id": [...]}``); anything else is an equality.
MEMBERSHIP = (list, tuple, set, frozenset)


@dataclass(frozen=True)
class Select:
    """Rows of ``model`` where every ``where`` item holds (attribute name → value, or a
    collection of values for membership) and, with ``pairs``, whose two named attributes are
    one of the given pairs. ``columns``: rows as tuples of these attributes, else instances.
    ``lock``: rows locked for update, in primary-key order."""

    model: type
    where: Mapping[str, Any] = field(default_factory=dict)
    pairs: tuple[tuple[str, str], Sequence[tuple]] | None = None
    columns: tuple[str, ...] | None = None
    lock: bool = False


class Store(ABC):
    """One implementation per database family; ``rms.store.get()`` picks it."""

    vendor: str = ""
    #: Whether a second connection may read while this one does (PostgreSQL); SQLite has one
    #: writer, and a page rendered on two connections gains nothing there.
    parallel_connections: bool = False

    @abstractmethod
    def read(self, selects: Sequence[Select]) -> list[list]:
        """The rows of each select, in order. Each select sees what the ones before it did: a
        lock taken by one holds for the next, and a row read after a lock was granted is the
        committed one (READ COMMITTED re-reads only the locked rows of the locking statement,
        so rows written under those locks must be read by a later select, never joined)."""

    @abstractmethod
    def insert(self, model, rows: Sequence) -> None:
        """INSERT every row (generated keys are not read back)."""

    @abstractmethod
    def update(self, model, rows: Sequence, field_names: Sequence[str]) -> None:
        """UPDATE ``field_names`` of every row, matched by primary key."""

    @abstractmethod
    def update_values(self, model, field_names: Sequence[str], rows: Sequence[Sequence]) -> None:
        """UPDATE ``field_names`` from tuples of plain values ``(pk, value, ...)``."""

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Small writes of the block may be sent together at its end (nothing is sent if it
        raises; its transaction is rolled back anyway). Nested blocks join the outer one."""
        yield

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """Writes of the block may be sent without waiting for each; errors (a unique key...)
        then surface when the block ends. Nested blocks join the outer one."""
        yield

    @contextlib.contextmanager
    def key_lookups(self) -> Iterator[None]:
        """Inside a transaction: the block's statements read and write sets of rows given by
        their keys (a sweep chunk's thousand objects, their aggregates, their sessions), so the
        database should probe the keys' index instead of reading the whole table. Settings are
        back as they were when the block ends (or with the transaction's rollback)."""
        yield

    def pipelining(self) -> bool:
        """Whether writes are being sent without waiting (so sending early pays)."""
        return False

    #: Whether a correlated EXISTS should also carry the outer query's window bounds.
    #: PostgreSQL plans it as a semi-join that reads the bounded index range once; SQLite runs
    #: it once per outer row, where the bounds steer it to the range index (a scan of the
    #: window's rows per outer row) instead of the correlated key's own index.
    bounded_semi_join: bool = True

    @abstractmethod
    def newest_per_key(
        self, model, key: str, limits: Mapping[Any, int], value: str, order: tuple[str, str]
    ) -> dict[Any, list[str]]:
        """{key value: the ``value`` column (as text) of its newest ``limits[key]`` rows}, newest
        first by ``order`` (two column attnames, both descending: a time and a tie-breaker);
        keys (UUIDs) without rows are absent. One query however long each key's history: on an index
        on ``(key, *order)`` it reads exactly the rows returned."""

    @abstractmethod
    def injection_window_sums(
        self, injections: models.QuerySet, wasteful_objects: models.QuerySet
    ) -> dict[int, dict]:
        """{namespace id: {"namespace_id", "n", "unused", "wasted"}} of the injection rows of
        ``injections`` (a filtered queryset of injection events: ``namespace_id``,
        ``ended_unused``, ``token_cost``, ``object_id``): how many, how many ended unused, and
        the token cost of those whose object is among ``wasteful_objects`` (a queryset of
        unique ``object_id`` values)."""

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see the database as of one moment: one transaction, or the caller's.
        (On SQLite it is the settings' IMMEDIATE transaction: the reads queue with the writers
        for their few milliseconds, as one writer would.)"""
        if connection.in_atomic_block:
            yield
            return
        with transaction.atomic():
            yield

    def grouped_sums(self, querysets: Sequence[models.QuerySet]) -> list[list[tuple]]:
        """The rows of each ``values_list`` queryset (the same columns in each), in order, read
        in one statement: the parts are small grouped reads, and a round trip costs about as
        much as one of them."""
        if not querysets:
            return []
        sqls, params = [], []
        for n, qs in enumerate(querysets):
            sql, p = qs.query.sql_with_params()
            sqls.append(f"SELECT {n} AS part, * FROM ({sql}) p{n}")
            params.extend(p)
        found: list[list[tuple]] = [[] for _ in querysets]
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(sqls), params)
            for row in cursor.fetchall():
                found[row[0]].append(tuple(row[1:]))
        return found

    def settle_writers(self) -> None:
        """Wait until every transaction that may hold ids below the ones just read has ended
        (SQLite has one writer, whose uncommitted rows get ids above every committed one)."""
        return

    # --- the change feed (``rms.changes``) ---

    @abstractmethod
    def release_bound(self) -> int:
        """What a feed page may release, read before the page: positions below it can no
        longer change (PostgreSQL: the transaction horizon; serialised writers: one past the
        last committed ``seq``)."""

    @abstractmethod
    def state_changes(
        self,
        beyond: int,
        namespaces: Sequence[str] | None = None,
        before: datetime | None = None,
        limit: int | None = None,
    ) -> list[tuple[str, uuid.UUID]]:
        """``(namespace, object id)`` of the operations that change an object's state
        (``events.OBJECT_STATE_OPS``) at or beyond ``beyond``, a :meth:`release_bound`: a
        superset of the objects changed since the snapshot of a read that followed that
        bound. Of ``namespaces`` (names) only, with ``before`` of an older ``ts`` only; with
        ``limit``, the pairs of at most that many operations (repeats kept), else distinct."""

    @abstractmethod
    def change_rows(
        self,
        after: Position,
        *,
        below: int,
        limit: int,
        op_types: Sequence[str],
        namespaces: Sequence[str] | None,
        as_json: bool = False,
        deployment: str | None = None,
    ) -> list[FeedRow]:
        """The first ``limit`` change operations after ``after`` in feed order, below
        ``below``, of these operation types and namespaces (None: all), their cursors naming
        ``deployment`` (None: none). With ``as_json`` a store may give each event as its JSON
        text (the same text ``json.dumps`` of ``rms.events.event`` gives)."""

    @abstractmethod
    def change_head(self, below: int) -> Position | None:
        """The last released change position (any namespace, any type), None when none is."""

    def position_issued(self, after: Position, below: int) -> bool:
        """Whether this log can have issued the position ``after`` (one ahead of it was not:
        a cursor of another deployment, or of a database since restored)."""
        return True

    # --- operations that are the same everywhere ---

    def ping(self) -> None:
        """One trivial statement on this thread's connection: raises if the database cannot
        answer (the health check)."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    def key_boundaries(self, qs: models.QuerySet, key: str, size: int) -> list[str]:
        """Every ``size``-th value of ``key`` in ``qs`` after the first (values number 1 + size,
        1 + 2·size, … in key order), as text, from one query: where to cut a pass into chunks
        of ``size`` keys (``taskruns.chunks``)."""
        inner_sql, params = (
            qs.order_by().annotate(fanout_key=F(key)).values("fanout_key").query.sql_with_params()
        )
        sql = (
            "SELECT k FROM (SELECT q.fanout_key AS k, ROW_NUMBER() OVER (ORDER BY q.fanout_key)"
            f" AS rn FROM ({inner_sql}) q) r WHERE rn > 1 AND (rn - 1) %% %s = 0 ORDER BY k"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, size])
            return [str(row[0]) for row in cursor.fetchall()]

    def lock_objects(self, ids: Iterable, *, namespaces: Iterable[Namespace] = ()) -> dict:
        """Lock the memory objects with these ids (primary-key order) and return them by id,
        each with its namespace attached (the ``namespaces`` given, the others read in one
        query); missing ids are simply absent."""
        (objects,) = self.read([Select(MemoryObject, where={"id": list(set(ids))}, lock=True)])
        return attach_namespaces(objects, namespaces)


def attach_namespaces(objects: Iterable, namespaces: Iterable[Namespace] = ()) -> dict:
    """{id: object}, each object's namespace attached: the ones given, the (few) others read in
    one query, instead of a join that builds a namespace per row."""
    objects = list(objects)
    known = {ns.pk: ns for ns in namespaces}
    missing = {obj.namespace_id for obj in objects} - known.keys()
    namespaces = {**known, **(Namespace.objects.in_bulk(missing) if missing else {})}
    for obj in objects:
        obj._state.fields_cache["namespace"] = namespaces[obj.namespace_id]  # Django's own cache
    return {obj.pk: obj for obj in objects}


def insert_fields(model) -> list:
    """The columns an insert writes: all concrete fields but an auto-increment key."""
    return [
        f
        for f in model._meta.concrete_fields
        if not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
    ]


def json_texts(rows: Sequence) -> Mapping[str, str]:
    """{JSON column attname: attribute holding its encoded text} of these rows' class."""
    return type(rows[0]).__dict__.get("JSON_TEXTS", {}) if rows else {}
