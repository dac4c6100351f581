"""The endpoints, written once: each method describes its HTTP call (a ``Call``) and hands it to
``self._run``, which the sync client runs at once and the async client returns as a coroutine.

Everything API.md makes idempotent is sent with what makes it so — a ``request_id`` for signals
and sessions, a client-chosen ``id`` for objects — generated once per logical call, so every
resend of that call carries the same one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

#: Largest lists the API takes in one request (API.md).
MAX_OBJECTS_PER_POST = 1000
MAX_SESSIONS_PER_BATCH = 500

_NO_BODY: Any = object()


@dataclass
class Call:
    method: str
    path: str
    params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None
    body: Any = _NO_BODY
    #: Safe to resend after an answer may have been lost (the server stores it once).
    idempotent: bool = False
    #: Applied to the decoded JSON answer.
    then: Callable[[Any], Any] | None = None
    #: GET paths that answer a 409 ``object_exists`` which followed a resend: the first
    #: attempt created the objects, so the call succeeded.
    fetch_if_exists: tuple[str, ...] = ()
    fetch_many: bool = False
    #: A 404 after a resend means the first attempt did it (DELETE).
    gone_ok: bool = False
    #: Return the body as text (CSV exports).
    text: bool = False
    timeout: float | None = None
    extra: dict = field(default_factory=dict)


def _results(body: Any) -> Any:
    return body["results"]


def encode(value: Any) -> Any:
    """JSON-ready values: datetimes as ISO 8601, UUIDs as strings; ``None`` keys dropped."""
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _params(**values: Any) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, list | tuple | set | frozenset):
            value = ",".join(sorted(value) if isinstance(value, set | frozenset) else value)
        out[key] = str(value)
    return out


def new_id() -> str:
    return str(uuid.uuid4())


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Endpoints:
    """One method per endpoint of API.md. ``_run``/``_run_all``/``_paginate``/``_collect`` are
    the sync or async drivers."""

    def _run(self, call: Call) -> Any:  # pragma: no cover - provided by the driver
        raise NotImplementedError

    def _run_all(self, calls: list[Call], combine: Callable[[list[Any]], Any]) -> Any:
        raise NotImplementedError  # pragma: no cover

    def _paginate(self, path: str, params: dict[str, Any]) -> Any:
        raise NotImplementedError  # pragma: no cover

    def _collect(self, path: str, params: dict[str, Any]) -> Any:
        raise NotImplementedError  # pragma: no cover

    # --- service and namespaces --------------------------------------------------------------

    def health(self) -> dict:
        """``GET /health`` (no token needed)."""
        return self._run(Call("GET", "/health", idempotent=True))

    def list_namespaces(self) -> list[dict]:
        return self._run(Call("GET", "/namespaces", idempotent=True, then=_results))

    def get_namespace(self, name: str) -> dict:
        return self._run(Call("GET", f"/namespaces/{name}", idempotent=True))

    def create_namespace(self, name: str, **settings: Any) -> dict:
        """Admin. ``ignore_threshold``, ``alert_thresholds``, ``weights``…"""
        return self._run(Call("POST", "/namespaces", body=encode({"name": name, **settings})))

    def update_namespace(self, name: str, **settings: Any) -> dict:
        """Admin. ``PATCH /namespaces/{name}``: ``retention_days``, ``weights``, ``retrieval``
        (each given one replaced whole)."""
        return self._run(Call("PATCH", f"/namespaces/{name}", body=encode(settings)))

    # --- objects ---------------------------------------------------------------------------

    def create_object(
        self, *, namespace: str, content: str, epistemic_type: str, **fields: Any
    ) -> dict:
        """``POST /objects`` with one object. Its ``id`` is chosen here when absent, so a
        resend after a lost answer finds the object instead of creating a second one."""
        item = encode(
            {"namespace": namespace, "content": content, "epistemic_type": epistemic_type} | fields
        )
        item.setdefault("id", new_id())
        return self._run(
            Call(
                "POST",
                "/objects",
                body=item,
                idempotent=True,
                fetch_if_exists=(f"/objects/{item['id']}",),
            )
        )

    def create_objects(self, items: Sequence[Mapping[str, Any]]) -> list[dict]:
        """``POST /objects`` with lists of up to 1000 (each list all-or-nothing)."""
        bodies = [encode(dict(item)) for item in items]
        for body in bodies:
            body.setdefault("id", new_id())
        calls = [
            Call(
                "POST",
                "/objects",
                body=list(part),
                idempotent=True,
                fetch_if_exists=tuple(f"/objects/{b['id']}" for b in part),
                fetch_many=True,
            )
            for part in chunks(bodies, MAX_OBJECTS_PER_POST)
        ]
        return self._run_all(calls, lambda parts: [o for part in parts for o in part])

    def get_object(self, object_id: str | uuid.UUID) -> dict:
        return self._run(Call("GET", f"/objects/{object_id}", idempotent=True))

    def list_objects(
        self,
        namespace: str | None = None,
        *,
        epistemic_type: str | None = None,
        pinned: bool | None = None,
        confidence_min: float | None = None,
        confidence_max: float | None = None,
        usage_ratio_min: float | None = None,
        usage_ratio_max: float | None = None,
        in_alert: bool | None = None,
        q: str | None = None,
        sort: str | None = None,
        page_size: int | None = None,
    ) -> Any:
        """Every visible object matching the filters, page after page (an iterator; async: an
        async iterator). ``sort``: ``confidence``, ``usage_ratio``, ``injections``,
        ``last_use``, ``tokens`` or ``created_at`` (the default), ``-`` for descending;
        ``in_alert``: in the namespace's review queue."""
        params = _params(
            namespace=namespace,
            epistemic_type=epistemic_type,
            pinned=pinned,
            confidence_min=confidence_min,
            confidence_max=confidence_max,
            usage_ratio_min=usage_ratio_min,
            usage_ratio_max=usage_ratio_max,
            in_alert=in_alert,
            q=q,
            sort=sort,
            page_size=page_size,
        )
        return self._paginate("/objects", params)

    def explain(self, object_id: str | uuid.UUID, *, as_of: datetime | str | None = None) -> dict:
        """``GET /objects/{id}/explain``: the confidence and effective salience as a list of
        contributions (initial value, each operation that moved them, decay) and the totals."""
        return self._run(
            Call("GET", f"/objects/{object_id}/explain", _params(as_of=as_of), idempotent=True)
        )

    def object_state(self, object_id: str | uuid.UUID, as_of: datetime | str) -> dict:
        return self._run(
            Call("GET", f"/objects/{object_id}/state", _params(as_of=as_of), idempotent=True)
        )

    def object_operations(self, object_id: str | uuid.UUID, *, page_size: int | None = None):
        """The object's operation chain, oldest first (an iterator)."""
        return self._paginate(f"/objects/{object_id}/operations", _params(page_size=page_size))

    def pin(
        self, object_id: str | uuid.UUID, reason: str, *, confidence: float | None = None
    ) -> dict:
        """Admin."""
        body = encode({"reason": reason, "confidence": confidence})
        return self._run(Call("POST", f"/objects/{object_id}/pin", body=body))

    def unpin(self, object_id: str | uuid.UUID, reason: str) -> dict:
        """Admin."""
        return self._run(Call("POST", f"/objects/{object_id}/unpin", body={"reason": reason}))

    def transition(self, object_id: str | uuid.UUID, to: str, reason: str) -> dict:
        """Admin; 409 if the transition is not allowed."""
        body = {"to": to, "reason": reason}
        return self._run(Call("POST", f"/objects/{object_id}/transition", body=body))

    def set_condition(self, object_id: str | uuid.UUID, condition_state: str) -> dict:
        body = {"condition_state": condition_state}
        return self._run(Call("POST", f"/objects/{object_id}/condition", body=body))

    # --- signals and sessions ----------------------------------------------------------------

    def signal(
        self,
        object_id: str | uuid.UUID,
        signal_type: str,
        *,
        session_id: str,
        actor_id: str | None = None,
        actor_type: str | None = None,
        detection_method: str | None = None,
        evidence_ids: Sequence[str] | None = None,
        request_id: str | None = None,
        ts: datetime | str | None = None,
    ) -> dict:
        """``POST /objects/{id}/signals`` → ``{"operation", "effect", "object"}``. A
        ``request_id`` is generated when absent, so a resend is answered from the first."""
        body = encode(
            {
                "signal_type": signal_type,
                "session_id": session_id,
                "actor_id": actor_id,
                "actor_type": actor_type,
                "detection_method": detection_method,
                "evidence_ids": list(evidence_ids) if evidence_ids is not None else None,
                "request_id": request_id or new_id(),
                "ts": ts,
            }
        )
        return self._run(Call("POST", f"/objects/{object_id}/signals", body=body, idempotent=True))

    def record_session(self, session: Mapping[str, Any]) -> dict:
        """``POST /feedback-sessions`` → the FEEDBACK_SESSION record (201, or 200 when the
        service had it). Adds a ``request_id`` if the body has none."""
        body = encode(dict(session))
        body.setdefault("request_id", new_id())
        return self._run(Call("POST", "/feedback-sessions", body=body, idempotent=True))

    def record_sessions(self, sessions: Sequence[Mapping[str, Any]]) -> list[dict]:
        """``POST /feedback-sessions/batch`` in chunks of ≤ 500 → the 207 items, in order
        (``{"status": 201|200|400|409, "record"|"error": …}``)."""
        bodies = [encode(dict(s)) for s in sessions]
        for body in bodies:
            body.setdefault("request_id", new_id())
        calls = [
            Call(
                "POST",
                "/feedback-sessions/batch",
                body=list(part),
                idempotent=True,
                then=_results,
            )
            for part in chunks(bodies, MAX_SESSIONS_PER_BATCH)
        ]
        return self._run_all(calls, lambda parts: [item for part in parts for item in part])

    def get_session(self, session_id: str | uuid.UUID) -> dict:
        """The stored record, by the record's ``id`` or by a ``session_id`` (its newest
        record)."""
        return self._run(Call("GET", f"/feedback-sessions/{session_id}", idempotent=True))

    # --- reading the loop --------------------------------------------------------------------

    def metrics(
        self,
        namespace: str,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> dict:
        params = _params(namespace=namespace, since=since, until=until)
        return self._run(Call("GET", "/metrics", params, idempotent=True))

    def retrieval_quality(
        self,
        namespace: str,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        actor_id: str | None = None,
    ) -> dict:
        """``GET /retrieval-quality``: precision at each rank, MRR, hit rate and wasted tokens
        by rank, from the namespace's injections and the signals of their sessions."""
        params = _params(namespace=namespace, since=since, until=until, actor_id=actor_id)
        return self._run(Call("GET", "/retrieval-quality", params, idempotent=True))

    def suppressed(
        self,
        namespace: str,
        *,
        salience_below: float | None = None,
        k: int | None = None,
        as_of: datetime | str | None = None,
        page_size: int | None = None,
    ) -> list[dict]:
        """``GET /suppressed``: eligible objects that decayed below ``salience_below`` or that
        no query can rank into the top ``k``, most buried first, each with its ``reasons``
        (all pages)."""
        params = _params(
            namespace=namespace,
            salience_below=salience_below,
            k=k,
            as_of=as_of,
            page_size=page_size,
        )
        return self._collect("/suppressed", params)

    def review_queue(self, namespace: str, *, page_size: int | None = None) -> list[dict]:
        """Operator. Every object due for review (all pages)."""
        return self._collect("/review-queue", _params(namespace=namespace, page_size=page_size))

    def rank(
        self,
        namespace: str,
        candidates: Iterable[tuple[str | uuid.UUID, float] | Mapping[str, Any]],
        now: datetime | None = None,
    ) -> list[dict]:
        """``POST /rank`` → ``[{object_id, score, eligible, reason, similarity, hotness,
        utility, …}]``, eligible first, best first. ``candidates``: ``(object_id,
        similarity)`` pairs or dicts; ``now`` fixes the clock of decay and hotness."""
        cands = [
            encode(dict(c))
            if isinstance(c, Mapping)
            else {"object_id": str(c[0]), "similarity": c[1]}
            for c in candidates
        ]
        body = encode({"namespace": namespace, "candidates": cands, "now": now})
        return self._run(Call("POST", "/rank", body=body, idempotent=True, then=_results))

    def ranking_state(
        self, namespace: str, *, cursor: str | None = None, page_size: int | None = None
    ) -> dict:
        """One page of ``GET /ranking-state`` → ``{"namespace", "feed_cursor", "profile",
        "event_types", "results", "next_cursor"}`` (a mirror's snapshot)."""
        params = _params(namespace=namespace, cursor=cursor, page_size=page_size)
        return self._run(Call("GET", "/ranking-state", params, idempotent=True))

    def detect(self, response_text: str, object_ids: Iterable[str | uuid.UUID]) -> list[dict]:
        """``POST /detect`` → one ``{object_id, signal_type, score, reason}`` per id."""
        body = {"response_text": response_text, "object_ids": [str(i) for i in object_ids]}
        return self._run(Call("POST", "/detect", body=body, idempotent=True, then=_results))

    def export_csv(self, kind: str, namespace: str) -> str:
        """``sessions`` or ``aggregates`` as CSV text."""
        return self._run(
            Call("GET", f"/export/{kind}.csv", _params(namespace=namespace), idempotent=True,
                 text=True)
        )  # fmt: skip

    # --- relationships -----------------------------------------------------------------------

    def create_relationship(
        self,
        source: str | uuid.UUID,
        target: str | uuid.UUID,
        relation: str,
        extraction_context: str,
        *,
        actor_id: str | None = None,
        ts: datetime | str | None = None,
    ) -> dict:
        body = encode(
            {
                "source": source,
                "target": target,
                "relation": relation,
                "extraction_context": extraction_context,
                "actor_id": actor_id,
                "ts": ts,
            }
        )
        return self._run(Call("POST", "/relationships", body=body))

    def add_evidence(
        self,
        relationship_id: str | uuid.UUID,
        kind: str,
        *,
        provenance: str | None = None,
        actor_id: str | None = None,
        ts: datetime | str | None = None,
    ) -> dict:
        """``corroborate`` or ``contradict``; → the relationship."""
        body = encode({"kind": kind, "provenance": provenance, "actor_id": actor_id, "ts": ts})
        return self._run(Call("POST", f"/relationships/{relationship_id}/evidence", body=body))

    def get_relationship(
        self, relationship_id: str | uuid.UUID, *, as_of: datetime | str | None = None
    ) -> dict:
        return self._run(
            Call("GET", f"/relationships/{relationship_id}", _params(as_of=as_of),
                 idempotent=True)
        )  # fmt: skip

    def object_relationships(self, object_id: str | uuid.UUID) -> list[dict]:
        return self._run(
            Call("GET", f"/objects/{object_id}/relationships", idempotent=True, then=_results)
        )

    def expand_graph(
        self, seeds: Mapping[str, float] | Iterable[tuple[str | uuid.UUID, float]]
    ) -> list[dict]:
        """``POST /graph/expand`` → ``[{object_id, score, path}]`` (seeds left out). The seeds
        go in the body: up to 100 of them make a query string longer than servers take."""
        pairs = seeds.items() if isinstance(seeds, Mapping) else seeds
        body = {"seeds": [{"object_id": str(oid), "score": score} for oid, score in pairs]}
        return self._run(Call("POST", "/graph/expand", body=body, idempotent=True, then=_results))

    def calibration(self, namespace: str) -> list[dict]:
        return self._run(
            Call("GET", "/calibration", _params(namespace=namespace), idempotent=True,
                 then=_results)
        )  # fmt: skip

    # --- tasks -------------------------------------------------------------------------------

    def start_task(self, kind: str, params: Mapping[str, Any] | None = None) -> dict:
        """Operator/admin: ``POST /tasks`` → 202 ``{"id", "kind", "state", …}``."""
        body = {"kind": kind, "params": encode(dict(params or {}))}
        return self._run(Call("POST", "/tasks", body=body))

    def get_task(self, task_id: str | uuid.UUID) -> dict:
        return self._run(Call("GET", f"/tasks/{task_id}", idempotent=True))

    def list_tasks(self, *, kind: str | None = None, state: str | None = None) -> list[dict]:
        return self._collect("/tasks", _params(kind=kind, state=state))

    # --- the closed loop: change feed, alerts, webhooks --------------------------------------

    def changes_page(
        self,
        *,
        namespace: str | None = None,
        after: str | None = None,
        types: Iterable[str] | None = None,
        limit: int | None = None,
        wait: float | None = None,
    ) -> dict:
        """One ``GET /changes`` → ``{"results", "next_cursor", "has_more"}``."""
        params = _params(
            namespace=namespace,
            after=after,
            types=list(types) if types is not None else None,
            limit=limit,
            wait=int(wait) if wait is not None else None,
        )
        return self._run(
            Call("GET", "/changes", params, idempotent=True, extra={"wait": wait or 0})
        )

    def alerts(
        self,
        *,
        namespace: str | None = None,
        state: str | None = None,
        metric: str | None = None,
    ) -> list[dict]:
        """Alert history, newest first."""
        params = _params(namespace=namespace, state=state, metric=metric)
        return self._collect("/alerts", params)

    def create_webhook(
        self,
        url: str,
        *,
        namespaces: Sequence[str] = (),
        event_types: Sequence[str] = (),
        description: str | None = None,
    ) -> dict:
        """Admin. The answer holds the ``secret``; it is shown only here."""
        body = encode(
            {
                "url": url,
                "namespaces": list(namespaces),
                "event_types": list(event_types),
                "description": description,
            }
        )
        return self._run(Call("POST", "/webhooks", body=body))

    def list_webhooks(self) -> list[dict]:
        return self._collect("/webhooks", {})

    def get_webhook(self, webhook_id: str | uuid.UUID) -> dict:
        return self._run(Call("GET", f"/webhooks/{webhook_id}", idempotent=True))

    def update_webhook(self, webhook_id: str | uuid.UUID, **fields: Any) -> dict:
        """``PATCH``: ``state``, ``url``, ``namespaces``, ``event_types``, ``description``."""
        body = encode(fields)
        return self._run(Call("PATCH", f"/webhooks/{webhook_id}", body=body, idempotent=True))

    def delete_webhook(self, webhook_id: str | uuid.UUID) -> None:
        return self._run(Call("DELETE", f"/webhooks/{webhook_id}", idempotent=True, gone_ok=True))

    def rotate_webhook_secret(self, webhook_id: str | uuid.UUID) -> dict:
        """→ ``{"secret": …}``; the old secret stops signing at once."""
        return self._run(Call("POST", f"/webhooks/{webhook_id}/rotate-secret", body={}))

    def test_webhook(self, webhook_id: str | uuid.UUID) -> dict:
        """Queues a ``webhook.test`` delivery (202)."""
        return self._run(Call("POST", f"/webhooks/{webhook_id}/test", body={}))

    def webhook_deliveries(self, webhook_id: str | uuid.UUID) -> list[dict]:
        return self._collect(f"/webhooks/{webhook_id}/deliveries", {})

    def retry_webhook_delivery(
        self, webhook_id: str | uuid.UUID, delivery_id: str | uuid.UUID
    ) -> dict:
        return self._run(
            Call("POST", f"/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", body={})
        )
