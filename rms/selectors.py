"""Core reads (STYLE §2): lookups scoped by the namespaces the acting client may see, object
lists, operation pages and states as of a time. Nothing here writes; the write services in
``rms.services`` call these lookups for the rows they then lock and change.

Scoping rule, in one place: an object or namespace the client may not see is answered exactly as
one that does not exist (404), except where the caller names a namespace it may not read (403).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Exists, F, OuterRef, Q, QuerySet, TextField
from django.db.models.functions import Cast

from rms import archive_verify, explain, extensions, object_query, oplog, policy, replay, store
from rms.errors import DomainError, Forbidden, NotFound
from rms.models import ApiClient, ChainCheckpoint, MemoryObject, Namespace, Operation

# --- namespaces -----------------------------------------------------------------------------------


def namespace_list(client: ApiClient) -> QuerySet:
    """The namespaces the client may see."""
    names = client.namespace_names()
    return Namespace.objects.all() if names is None else Namespace.objects.filter(name__in=names)


def namespace_visible(client: ApiClient, name: str) -> Namespace:
    """The namespace by name, 404 if it does not exist or the client cannot see it."""
    ns = Namespace.objects.filter(name=name).first()
    if ns is None or not client.can_see(name):
        raise NotFound("No such namespace.")
    return ns


def namespace_readable(client: ApiClient, name: str) -> Namespace:
    """A namespace the client asked to read by name: 403 not theirs, 404 unknown."""
    if not client.can_see(name):
        raise Forbidden(f"You may not read namespace {name!r}.")
    ns = Namespace.objects.filter(name=name).first()
    if ns is None:
        raise NotFound(f"No namespace {name!r}.")
    return ns


# --- objects --------------------------------------------------------------------------------------


def visible_object_map(client: ApiClient, ids: Iterable, *, namespace=None) -> dict:
    """{id: object} of the objects with these ids the client may see (and in ``namespace``
    when given), with their namespaces, in one query. Ids not in the answer are unknown to the
    client, whether they do not exist or are out of its reach."""
    qs = MemoryObject.objects.select_related("namespace").filter(pk__in=list(ids))
    if namespace is not None:
        qs = qs.filter(namespace=namespace)
    return {o.pk: o for o in qs if client.can_see(o.namespace.name)}


def visible_objects(client: ApiClient, ids: list, field: str, *, namespace=None) -> dict:
    """:func:`visible_object_map`, or 400 ``unknown_object`` naming (up to 20 of) the missing ids
    under ``field``."""
    found = visible_object_map(client, ids, namespace=namespace)
    missing = [str(i) for i in ids if i not in found]
    if missing:
        message = (
            "Some objects are unknown."
            if namespace is None
            else "Some objects do not exist in this namespace."
        )
        raise DomainError(
            "unknown_object",
            message,
            400,
            {field: [f"Unknown object {i}." for i in missing[:20]]},
        )
    return found


def visible_object(client: ApiClient, object_id, *, lock: bool = False) -> MemoryObject:
    """The object by id, 404 if it does not exist or the caller cannot see its namespace.

    ``lock``: read it under its row lock (for a write service, inside its transaction)."""
    if lock:
        obj = store.get().lock_objects([object_id]).get(object_id)
    else:
        obj = MemoryObject.objects.select_related("namespace").filter(pk=object_id).first()
    if obj is None or not client.can_see(obj.namespace.name):
        raise NotFound("No such object.")
    return obj


def object_list(
    client: ApiClient,
    *,
    namespace: str | None = None,
    epistemic_type: str | None = None,
    pinned: bool | None = None,
    query: object_query.ObjectQuery | None = None,
) -> QuerySet:
    """The objects the client may see, filtered; 403 for a named namespace not theirs. The
    caller orders and pages it (``ordered`` gives the order a ``query`` asks for)."""
    if query is None:
        query = object_query.ObjectQuery(
            namespace=namespace, epistemic_type=epistemic_type, pinned=pinned
        )
    qs = MemoryObject.objects.select_related("namespace")
    # Namespaces by id, looked up first: a condition on the column itself lets the planner
    # walk an index (namespace, column, id) in the order asked instead of sorting every row.
    if query.namespace:
        if not client.can_see(query.namespace):
            raise Forbidden(f"You may not read namespace {query.namespace!r}.")
        ids = list(Namespace.objects.filter(name=query.namespace).values_list("id", flat=True))
        qs = qs.filter(namespace_id__in=ids)
    elif (names := client.namespace_names()) is not None:
        ids = list(Namespace.objects.filter(name__in=names).values_list("id", flat=True))
        qs = qs.filter(namespace_id__in=ids)
    if query.epistemic_type:
        qs = qs.filter(epistemic_type=query.epistemic_type)
    if query.pinned is not None:
        qs = qs.filter(pinned=query.pinned)
    if query.confidence_min is not None:
        qs = qs.filter(confidence__gte=query.confidence_min)
    if query.confidence_max is not None:
        qs = qs.filter(confidence__lte=query.confidence_max)
    if query.text:
        qs = qs.filter(content__icontains=query.text)
    filters = extensions.object_filters()
    for name, value in query.extra.items():
        if name in filters:
            qs = qs.filter(filters[name][1](value))
    return qs


def object_query_of(params) -> tuple[object_query.ObjectQuery, dict]:
    """An object listing's filters and sort from a query string, with the registered ones."""
    filters = extensions.object_filters()
    return object_query.parse(
        params,
        unit_filters=tuple(n for n, (kind, _) in filters.items() if kind == "unit"),
        bool_filters=tuple(n for n, (kind, _) in filters.items() if kind == "bool"),
        sorts=tuple(extensions.object_sorts()),
    )


def ordered(qs: QuerySet, query: object_query.ObjectQuery) -> QuerySet | NullsApart:
    """``qs`` in the query's order, ties by id. The object's own columns are never null, so
    their order is plain and an index (namespace, column, id) serves it; a registered column
    (the aggregate's) is missing for an object never injected, which sorts as the smallest:
    that order is read as two parts (:class:`NullsApart`)."""
    if query.sort in object_query.CORE_SORTS:
        path = object_query.CORE_SORTS[query.sort]
        return qs.order_by(f"-{path}", "-id") if query.descending else qs.order_by(path, "id")
    path = extensions.object_sorts()[query.sort]
    values = qs.filter(**{f"{path}__isnull": False})
    relation, column = path.split("__", 1)
    related = MemoryObject._meta.get_field(relation)
    table = related.related_model._meta.db_table
    if any(getattr(join, "table_name", None) == table for join in qs.query.alias_map.values()):
        # A filter already joins the sort's table (usage_ratio_max, in_alert): keep its join,
        # so the planner sees when that filter leaves no row without a value.
        nulls = qs.filter(**{f"{path}__isnull": True})
    else:
        # "No value" as NOT EXISTS: an anti-join the planner probes row by row in id order and
        # stops at the page's end; an outer join's IS NULL it would answer by joining every row.
        has_value = related.related_model.objects.filter(
            **{related.field.name: OuterRef("pk"), f"{column}__isnull": False}
        )
        nulls = qs.filter(~Exists(has_value))
    if query.descending:
        return NullsApart(values.order_by(F(path).desc(), "-id"), nulls.order_by("-id"), qs)
    return NullsApart(nulls.order_by("id"), values.order_by(path, "id"), qs)


class NullsApart:
    """A listing ordered by a column that is null for some rows (an object's aggregate: none
    for an object never injected), nulls as the smallest values, ties by id: the rows where it
    is null (by id) and the rows where it is not (by it, then id) as two queries, one after the
    other. Each part is an inner-joined or plainly ordered query an index serves in order
    (``agg_*_obj``, the primary key), so a page reads its rows instead of joining and sorting
    every object of the listing as one ``ORDER BY … NULLS FIRST`` over an outer join must.

    Sliced and counted like a queryset (``Paginator``, ``rms.api.pagination.offset_page``): a
    page that starts in the first part and runs past its end continues with the second."""

    ordered = True  # for Paginator: the order is total (ties by id)

    def __init__(self, first: QuerySet, second: QuerySet, whole: QuerySet) -> None:
        self.parts = (first, second)
        self.whole = whole
        self._first_count: int | None = None

    def _count_first(self) -> int:
        if self._first_count is None:
            self._first_count = self.parts[0].count()
        return self._first_count

    def count(self) -> int:
        """The listing's rows: one count of the unordered listing (no join to the sort's
        table unless a filter needs it)."""
        return self.whole.count()

    def __len__(self) -> int:
        return self.count()

    def __iter__(self):
        return iter(self[0:None])

    def __getitem__(self, key):
        if isinstance(key, int):
            rows = self[key : key + 1]
            if not rows:
                raise IndexError(key)
            return rows[0]
        if key.step is not None or (key.start or 0) < 0 or (key.stop or 0) < 0:
            raise ValueError("Only forward slices without a step.")
        start, stop = key.start or 0, key.stop
        if stop is not None and stop <= start:
            return []
        first, second = self.parts
        rows = list(first[start:stop])
        if stop is not None and len(rows) == stop - start:
            return rows
        # The slice runs past the first part: its length is known when the slice reached it.
        if rows:
            self._first_count = start + len(rows)
        n_first = self._count_first()
        rest = None if stop is None else stop - max(start, n_first)
        skip = max(0, start - n_first)
        rows += list(second[skip : None if rest is None else skip + rest])
        return rows


def object_state_as_of(obj: MemoryObject, as_of: datetime) -> tuple[Operation, int]:
    """The last operation with ts ≤ ``as_of`` that carries the object's state, and the object's
    version then; 404 when the object did not exist at that time. Before the retention cut
    (``ChainCheckpoint``) the answer comes from the archive; 410 when the archive is gone."""
    op = oplog.state_as_of(obj.pk, as_of)
    # every operation left is after the cut: only an answer not found may lie in the archive
    cp = ChainCheckpoint.objects.filter(target_id=obj.pk).first() if op is None else None
    if cp is not None:
        return _archived_state_as_of(obj, cp, as_of)
    if op is None:
        raise NotFound("The object did not exist at that time.")
    return op, oplog.version_as_of(obj.pk, as_of, op)


def _archived_state_as_of(obj: MemoryObject, cp: ChainCheckpoint, as_of: datetime):
    after_cut = Operation.objects.filter(target_id=obj.pk, ts__lte=as_of).count()
    if as_of >= cp.ts and cp.fold is not None:  # the state at the cut, no archive read needed
        fold = cp.fold
        return _archived_op(obj, fold["state_op"], fold["state"]), fold["version"] + after_cut
    try:
        rows = archive_verify.archived_ops(cp.namespace, obj.pk, as_of)
    except archive_verify.Gone as exc:
        raise DomainError("archived", f"{exc} That time is before the retention cut.", 410) from exc
    stated = [i for i, row in enumerate(rows) if row["state"] is not None]
    if not stated:
        raise NotFound("The object did not exist at that time.")
    last = rows[stated[-1]]
    op = _archived_op(obj, last, last["state"])
    return op, last["state"]["version"] + len(rows) - 1 - stated[-1] + after_cut


def _archived_op(obj: MemoryObject, row: dict, state: dict) -> Operation:
    """An archived operation as an unsaved row, for the ``state?as_of`` answer."""
    ts = datetime.fromisoformat(row["ts"])
    return Operation(
        seq=row["seq"], id=row["id"], op_type=row["op_type"], ts=ts, target_id=obj.pk, state=state
    )


def operations_page(
    obj: MemoryObject, *, after: tuple[int, datetime | None] | None, size: int
) -> tuple[list[Operation], bool]:
    """Up to ``size`` operations of the object's chain after ``after`` = (seq, ts), oldest first,
    and whether more follow. ``ts`` None (a cursor from before it was added) is still right, only
    slower: ``ts >= t`` bounds the index range, the rest of the tie is excluded by ``seq``."""
    qs = Operation.objects.filter(target_id=obj.pk)
    if after is not None:
        seq, ts = after
        if ts is None:
            qs = qs.filter(seq__gt=seq)
        else:
            qs = qs.filter(ts__gte=ts).exclude(ts=ts, seq__lte=seq)
    # A chain's (ts, seq) order is its seq order (ts never goes back on a chain, and each
    # operation is appended under the target's lock), and (ts, seq) is the index's: a page
    # reads its own rows, not the whole chain (a sort of every row of a long chain).
    rows = list(qs.order_by("ts", "seq")[: size + 1])
    return rows[:size], len(rows) > size


# --- explanations ---------------------------------------------------------------------------------

#: The columns of an operation the explanation reads, beside its payload.
_CHAIN_FIELDS = ("id", "seq", "op_type", "ts", "actor_id", "actor_type", "session_id")


def object_explanation(obj: MemoryObject, as_of: datetime) -> dict | None:
    """Why ``obj``'s confidence and salience were what they were at ``as_of``
    (``rms.explain``), or None when it did not exist yet.

    One indexed read of its chain up to ``as_of``, only the operations the fold reads: those
    that move the state and the FEEDBACK_EVENTs of refused signals (injections, sweep checks
    and the FEEDBACK_EVENT beside each applied signal, most of a long chain, stay in the
    table). Only the columns the fold reads, as plain rows (no model instances); the payloads
    come as their JSON text and are decoded in one call for the whole chain, not by the
    driver one row at a time (which costs about twice as much on a 1,000-operation chain)."""
    # A chain's (ts, seq) order is its seq order (ts never goes back on a chain).
    rows = list(
        Operation.objects.filter(target_id=obj.pk, ts__lte=as_of)
        .filter(
            Q(op_type__in=explain.STATE_OP_TYPES)
            | Q(op_type="FEEDBACK_EVENT", payload__effect=policy.EFFECT_REJECTED)
        )
        .annotate(payload_text=Cast("payload", TextField()))
        .order_by("ts", "seq")
        .values_list(*_CHAIN_FIELDS, "payload_text", named=True)
    )
    payloads = json.loads("[" + ",".join(row.payload_text for row in rows) + "]")
    records = list(map(replay.OpRecord.from_row, rows, payloads))
    if not records or records[0].op_type != "OBJECT_CREATED":
        # The log lacks the creation: not created yet, or its creation is archived (a
        # checkpoint). Then the archived operations go first and the chain folds once; a
        # chain still whole in the log reads no checkpoint.
        cp = ChainCheckpoint.objects.filter(target_id=obj.pk).first()
        if cp is not None:
            records = [*_archived_records(cp, obj.pk, as_of), *records]
    try:
        answer = explain.explain(records, created_at=obj.created_at, as_of=as_of)
    except explain.NotYetCreated:
        return None
    return {"id": str(obj.pk), "namespace": obj.namespace.name, **answer}


def _archived_records(cp: ChainCheckpoint, target_id, as_of: datetime) -> list[replay.OpRecord]:
    """The archived operations up to ``as_of`` the explanation folds (as the log's read
    selects them); 410 when the archive is gone."""
    try:
        rows = archive_verify.archived_ops(cp.namespace, target_id, as_of)
    except archive_verify.Gone as exc:
        raise DomainError("archived", f"{exc} The explanation needs it.", 410) from exc
    return [
        archive_verify.record(row)
        for row in rows
        if row["op_type"] in explain.STATE_OP_TYPES
        or (
            row["op_type"] == "FEEDBACK_EVENT"
            and row["payload"].get("effect") == policy.EFFECT_REJECTED
        )
    ]
