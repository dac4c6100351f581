"""Reads of the feedback sessions list and one session's page (SPEC §7)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Prefetch, Q, Subquery, Sum

from feedback.models import (
    FeedbackSession,
    InjectionEvent,
    SessionNamespace,
    SignalRecord,
)
from rms import policy
from rms.models import MemoryObject, Namespace, Operation

# --- feedback sessions (SPEC §7) -----------------------------------------------------------------

#: Sortable columns are those of the scope rows: sorting by a session column would join and sort
#: every session of the namespace for each page (about 200 ms at 100k sessions).
SESSION_SORTS = {
    "ts": "ts",
    "context_budget": "context_budget",
}


def session_rows(
    namespace: Namespace,
    *,
    sort: str,
    descending: bool,
    outcome: str | None = None,
    corrected: bool | None = None,
    session_id: str | None = None,
):
    """A namespace's feedback sessions (a session counts in each namespace of its scope).

    The page is cut from the scope rows alone (the ``sessns_ns_ts`` index) and its sessions are
    fetched afterwards: joining first would sort every session of the namespace for each page.
    """
    qs = SessionNamespace.objects.filter(namespace=namespace).prefetch_related(
        Prefetch(
            "session",
            queryset=FeedbackSession.objects.defer("stored_record", "context_text", "body_hash"),
        )
    )
    if outcome == "none":
        qs = qs.filter(session__outcome__isnull=True)
    elif outcome:
        qs = qs.filter(session__outcome=outcome)
    if corrected is not None:
        qs = qs.filter(has_corrected=corrected)
    if session_id:
        qs = qs.filter(session__session_id=session_id)
    key = SESSION_SORTS.get(sort, "ts")
    return qs.order_by(f"-{key}" if descending else key, "-id" if descending else "id")


def session_page_counts(
    session_ids: list, readable_namespaces: set[str] | None = None
) -> tuple[dict, dict]:
    """Per session of one page: injections (n, Σ cost, unused) and signals (n, corrected,
    positive), two grouped queries; with ``readable_namespaces``, of their objects only."""
    if not session_ids:
        return {}, {}
    on_readable = (
        Q() if readable_namespaces is None else Q(object__namespace__name__in=readable_namespaces)
    )
    inj = {
        r["session_id"]: r
        for r in InjectionEvent.objects.filter(on_readable, session_id__in=session_ids)
        .values("session_id")
        .annotate(
            n=Count("id"), cost=Sum("token_cost"), unused=Count("id", filter=Q(ended_unused=True))
        )
        .order_by()
    }
    sig = {
        r["feedback_session_id"]: r
        for r in SignalRecord.objects.filter(on_readable, feedback_session_id__in=session_ids)
        .values("feedback_session_id")
        .annotate(
            n=Count("id"),
            corrected=Count("id", filter=Q(signal_type=policy.CORRECTED)),
            automatic=Count("id", filter=Q(automatic=True)),
        )
        .order_by()
    }
    return inj, sig


@dataclass
class SessionChange:
    object_id: object
    op_type: str
    signal_type: str
    seq: int
    confidence_before: float
    confidence_after: float
    salience_before: float | None
    salience_after: float | None
    object: MemoryObject | None = None

    @property
    def delta(self) -> float:
        return (self.confidence_after or 0.0) - (self.confidence_before or 0.0)


def session_changes(
    session: FeedbackSession, signal_op_ids: set, on_readable: Q | None = None
) -> list[SessionChange]:
    """The REINFORCE / PENALTY operations this session's signals caused, in one query.

    Every operation of a session carries the session's ts, so the candidates are the operations
    at that ts on the chains of the objects it touched (the ``op_target_ts`` index); a change
    operation belongs to this session exactly when it follows one of this session's
    FEEDBACK_EVENT operations on its chain (its prev_hash is that event's hash).
    """
    rows = list(
        Operation.objects.filter(
            target_id__in=Subquery(
                SignalRecord.objects.filter(on_readable or Q(), feedback_session=session).values(
                    "object_id"
                )
            ),
            ts=session.ts,
            op_type__in=("FEEDBACK_EVENT", "REINFORCE", "PENALTY"),
        )
        .order_by("seq")
        .values_list("seq", "id", "op_type", "target_id", "prev_hash", "hash", "payload")
    )
    event_hashes = {
        h for _, op_id, t, _, _, h, _ in rows if t == "FEEDBACK_EVENT" and op_id in signal_op_ids
    }
    out = []
    for seq, _, op_type, target, prev_hash, _, payload in rows:
        if op_type == "FEEDBACK_EVENT" or prev_hash not in event_hashes:
            continue
        out.append(
            SessionChange(
                object_id=target,
                op_type=op_type,
                signal_type=payload.get("signal_type", ""),
                seq=seq,
                confidence_before=payload.get("confidence_before"),
                confidence_after=payload.get("confidence_after"),
                salience_before=payload.get("salience_before"),
                salience_after=payload.get("salience_after"),
            )
        )
    return out


@dataclass
class SessionDetail:
    """A feedback session's page: its injections and signals in order, with the content of
    their objects, and the changes its signals caused (each with its object)."""

    injections: list[InjectionEvent]
    signals: list[SignalRecord]
    changes: list[SessionChange]


def session_detail(
    session: FeedbackSession, readable_namespaces: set[str] | None = None
) -> SessionDetail:
    """Three queries: injections, signals (each with its object's id and content), changes.

    With ``readable_namespaces`` (a reader limited to them), only the injections and signals on
    objects of those namespaces: a session's scope may span namespaces the reader may not see.
    """
    on_readable = (
        Q() if readable_namespaces is None else Q(object__namespace__name__in=readable_namespaces)
    )
    injections = list(
        InjectionEvent.objects.filter(on_readable, session=session)
        .select_related("object")
        .only(
            "rank_position",
            "representation_type",
            "token_cost",
            "composite_score",
            "str_value",
            "ended_unused",
            "object__id",
            "object__content",
            "object__epistemic_type",
        )
        .order_by("rank_position", "id")
    )
    signals = list(
        SignalRecord.objects.filter(on_readable, feedback_session=session)
        .select_related("object")
        .only(
            "signal_type",
            "detection_method",
            "reliability_class",
            "base_weight",
            "effective_weight",
            "effect",
            "reason",
            "actor_id",
            "actor_type",
            "automatic",
            "operation_id",
            "object__id",
            "object__content",
        )
        .order_by("id")
    )
    changes = session_changes(session, {s.operation_id for s in signals}, on_readable)
    contents = {i.object_id: i.object for i in injections} | {
        s.object_id: s.object for s in signals
    }
    for c in changes:
        c.object = contents.get(c.object_id)
    return SessionDetail(injections, signals, changes)
