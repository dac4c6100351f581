"""Relationship services and selectors (SPEC §13): edges with Beta-Binomial confidence.

Writes follow the core rule: one transaction per change, the edge row locked, one operation
(EDGE_CREATED or EDGE_EVIDENCE) on the edge's own hash chain with the state after it, so the
posterior at any past time is one indexed read and replay can re-derive it through
``rms.evidence`` — the same pure functions the live path calls.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from rms import evidence, oplog, store
from rms.errors import DomainError, NotFound
from rms.models import ApiClient, MemoryObject, Operation, Relationship
from rms.policy import DEPRECATED
from rms.replay import iso
from rms.selectors import visible_object_map
from rms.services import Actor, check_not_future, resolve_ts


def edge_state(rel: Relationship) -> dict:
    return {
        "alpha": rel.alpha,
        "beta": rel.beta,
        "last_corroborated_at": iso(rel.last_corroborated_at),
        "corroborations": rel.corroborations,
        "contradictions": rel.contradictions,
        "version": rel.version,
    }


def _append(rel: Relationship, op_type: str, *, ts: datetime, payload: dict, actor: Actor):
    rel.version += 1
    return oplog.append(
        rel,
        target_type=oplog.TARGET_RELATIONSHIP,
        namespace=rel.namespace.name,
        op_type=op_type,
        ts=ts,
        payload=payload,
        actor_id=actor.id,
        actor_type=actor.type,
        state=edge_state(rel),
        policy_version="beta_binomial_v1",
    )


def _visible_objects(client: ApiClient, ids: dict[str, uuid.UUID]) -> dict[str, MemoryObject]:
    found = visible_object_map(client, ids.values())
    out, errors = {}, {}
    for field, object_id in ids.items():
        obj = found.get(object_id)
        if obj is None:
            errors[field] = ["Unknown object."]
        else:
            out[field] = obj
    if errors:
        raise DomainError("unknown_object", "Unknown or invisible object.", 400, errors)
    return out


def relationship_create(
    *,
    client: ApiClient,
    source: uuid.UUID,
    target: uuid.UUID,
    relation: str,
    extraction_context: str,
    ts: datetime | None = None,
    actor: Actor | None = None,
) -> Relationship:
    """An edge with the prior of its extraction context (concentration 10)."""
    if source == target:
        raise DomainError(
            "self_relationship",
            "An object cannot relate to itself.",
            400,
            {"target": ["Must differ from source."]},
        )
    objs = _visible_objects(client, {"source": source, "target": target})
    if objs["source"].namespace_id != objs["target"].namespace_id:
        raise DomainError(
            "cross_namespace",
            "Source and target must share a namespace.",
            400,
            {"target": ["Must be in the source's namespace."]},
        )
    check_not_future(ts)
    created = ts or timezone.now()
    actor = actor or Actor.of(client)
    alpha, beta = evidence.prior(extraction_context)
    rel = Relationship(
        id=uuid.uuid4(),
        namespace=objs["source"].namespace,
        source=objs["source"],
        target=objs["target"],
        relation=relation,
        extraction_context=extraction_context,
        alpha=alpha,
        beta=beta,
        created_by=actor.id,
        created_at=created,
        last_op_ts=created,
    )
    op = _append(
        rel,
        "EDGE_CREATED",
        ts=created,
        actor=actor,
        payload={
            "source": str(source),
            "target": str(target),
            "relation": relation,
            "extraction_context": extraction_context,
            "alpha": alpha,
            "beta": beta,
        },
    )
    try:
        with transaction.atomic():
            rel.save(force_insert=True)
            store.get().insert(Operation, [op])
    except IntegrityError as exc:
        raise DomainError(
            "relationship_exists",
            "This relationship already exists; add evidence to it instead.",
            409,
        ) from exc
    return rel


def visible_relationship(client: ApiClient, rel_id, *, lock: bool = False) -> Relationship:
    qs = Relationship.objects.select_related("namespace").filter(pk=rel_id)
    if lock:
        qs = qs.select_for_update(of=("self",))
    rel = qs.first()
    if rel is None or not client.can_see(rel.namespace.name):
        raise NotFound("No such relationship.")
    return rel


def relationship_evidence(
    *,
    client: ApiClient,
    relationship_id,
    kind: str,
    provenance: str | None = None,
    ts: datetime | None = None,
    actor: Actor | None = None,
) -> Relationship:
    """Corroborate (+w to α) or contradict (+w to β); w by provenance (SPEC §13)."""
    actor = actor or Actor.of(client)
    with transaction.atomic():
        rel = visible_relationship(client, relationship_id, lock=True)
        at = resolve_ts(ts, [rel.last_op_ts])
        before = evidence.EdgePosterior(rel.alpha, rel.beta, rel.last_corroborated_at)
        after = evidence.step_edge(before, kind, provenance, at)
        rel.alpha, rel.beta, rel.last_corroborated_at = after
        if kind == evidence.CORROBORATE:
            rel.corroborations += 1
        else:
            rel.contradictions += 1
        op = _append(
            rel,
            "EDGE_EVIDENCE",
            ts=at,
            actor=actor,
            payload={
                "kind": kind,
                "provenance": evidence.normalize_provenance(provenance),
                "weight": evidence.provenance_weight(provenance),
                "alpha_before": before.alpha,
                "beta_before": before.beta,
                "alpha_after": after.alpha,
                "beta_after": after.beta,
                "mean_after": evidence.mean(after.alpha, after.beta),
                "resets_clock": evidence.resets_clock(kind, provenance),
            },
        )
        rel.save()
        store.get().insert(Operation, [op])
    return rel


# --- reads ---------------------------------------------------------------------------------------


def relationship_out(rel: Relationship, now: datetime, state: dict | None = None) -> dict:
    """The edge's posterior, from the row or from a stored state (``as_of``), at ``now``."""
    if state is None:
        alpha, beta, last = rel.alpha, rel.beta, rel.last_corroborated_at
        counts = (rel.corroborations, rel.contradictions, rel.version)
    else:
        alpha, beta = state["alpha"], state["beta"]
        raw = state["last_corroborated_at"]
        last = datetime.fromisoformat(raw) if raw else None
        counts = (state["corroborations"], state["contradictions"], state["version"])
    return {
        "id": str(rel.pk),
        "namespace": rel.namespace.name,
        "source": str(rel.source_id),
        "target": str(rel.target_id),
        "relation": rel.relation,
        "extraction_context": rel.extraction_context,
        "alpha": alpha,
        "beta": beta,
        "mean": evidence.mean(alpha, beta),
        "variance": evidence.variance(alpha, beta),
        "effective_confidence": evidence.effective_confidence(
            alpha, beta, last, rel.created_at, now
        ),
        "prior_mean": evidence.PRIOR_MEANS[rel.extraction_context],
        "corroborations": counts[0],
        "contradictions": counts[1],
        "created_at": iso(rel.created_at),
        "last_corroborated_at": iso(last),
        "version": counts[2],
    }


def relationship_as_of(rel: Relationship, as_of: datetime) -> dict:
    op = oplog.state_as_of(rel.pk, as_of)
    if op is None:
        raise NotFound("The relationship did not exist at that time.")
    return {**relationship_out(rel, as_of, op.state), "as_of": iso(as_of)}


def object_relationships(obj: MemoryObject, now: datetime) -> list[dict]:
    edges = Relationship.objects.select_related("namespace").filter(
        source=obj
    ) | Relationship.objects.select_related("namespace").filter(target=obj)
    return [relationship_out(r, now) for r in edges.order_by("created_at", "id")]


def expand(client: ApiClient, seeds: dict[uuid.UUID, float], now: datetime) -> list[dict]:
    """One hop from the seeds in both directions (SPEC §13), DEPRECATED objects skipped."""
    _visible_objects(client, {f"seed.{i}": s for i, s in enumerate(seeds)})
    rels = list(
        Relationship.objects.select_related("namespace", "source", "target").filter(
            source_id__in=seeds
        )
        | Relationship.objects.select_related("namespace", "source", "target").filter(
            target_id__in=seeds
        )
    )
    rels = [r for r in rels if client.can_see(r.namespace.name)]
    excluded = {o.pk for r in rels for o in (r.source, r.target) if o.epistemic_type == DEPRECATED}
    edges = [
        evidence.ExpansionEdge(
            r.pk,
            r.source_id,
            r.target_id,
            evidence.effective_confidence(
                r.alpha, r.beta, r.last_corroborated_at, r.created_at, now
            ),
        )
        for r in rels
    ]
    return [
        {
            "object_id": str(res.object_id),
            "score": res.score,
            "seed": str(res.seed_id),
            "path": [str(p) for p in res.path],
        }
        for res in evidence.expand_graph(seeds, edges, excluded)
    ]


def calibration(namespace) -> list[dict]:
    """Per extraction context: the prior against what user/external evidence later showed."""
    contexts = dict(
        Relationship.objects.filter(namespace=namespace).values_list("id", "extraction_context")
    )
    observed: dict = {rel_id: [] for rel_id in contexts}
    rows = (
        Operation.objects.filter(target_id__in=contexts, op_type="EDGE_EVIDENCE")
        .order_by("seq")
        .values_list("target_id", "payload")
    )
    for rel_id, payload in rows.iterator(chunk_size=5000):
        observed[rel_id].append((payload["kind"], payload["provenance"]))
    records = [evidence.EdgeRecord(contexts[r], tuple(ev)) for r, ev in observed.items()]
    return [row.__dict__ for row in evidence.calibration(records)]


def verify_edge_replay(rel: Relationship) -> list[dict]:
    """Re-derive the posterior after each operation through ``rms.evidence``."""
    mismatches = []
    state = None
    counts = [0, 0]
    for version, op in enumerate(Operation.objects.filter(target_id=rel.pk).order_by("seq"), 1):
        if op.op_type == "EDGE_CREATED":
            state = evidence.initial_edge(op.payload["extraction_context"])
        elif op.op_type == "EDGE_EVIDENCE" and state is not None:
            p = op.payload
            state = evidence.step_edge(state, p["kind"], p["provenance"], op.ts)
            counts[0 if p["kind"] == evidence.CORROBORATE else 1] += 1
        expected = {
            "alpha": state.alpha,
            "beta": state.beta,
            "last_corroborated_at": iso(state.last_corroborated_at),
            "corroborations": counts[0],
            "contradictions": counts[1],
            "version": version,
        }
        if op.state != expected:
            mismatches.append({"seq": op.seq, "op_type": op.op_type})
    if state is None or (state.alpha, state.beta) != (rel.alpha, rel.beta):
        mismatches.append({"seq": None, "where": "relationship row"})
    return mismatches
