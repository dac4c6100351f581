"""Beta-Binomial confidence on relationships between memory objects (SPEC §13). Pure: stdlib only.

Each edge carries a Beta(α, β) posterior over "this relationship holds". The prior comes from how
the edge was extracted; every piece of evidence adds a provenance-weighted pseudo-observation;
staleness is layered on at read time as a 90-day half-life, never written back. The live services,
replay, the simulations and the tests all call the functions below, so a replayed posterior is
bit-identical to the stored one: the order of floating-point operations is part of the contract.

The reasoning comes from recall-echo (seed 001); SPEC §13 settles the numbers and adds what
recall-echo lacks: weights by provenance, a decay clock the agent cannot reset on its own edges,
and calibration of the priors against the evidence that followed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

# --- SPEC §13: priors by extraction context (FIXED) -----------------------------------------------
AUTHORITATIVE = "AUTHORITATIVE"
EXPLICIT = "EXPLICIT"
INFERRED = "INFERRED"
SPECULATIVE = "SPECULATIVE"

#: Prior mean m per extraction context: how often a relationship extracted this way is expected to
#: hold before any evidence. Calibration (below) checks these guesses against later evidence.
PRIOR_MEANS: dict[str, float] = {
    AUTHORITATIVE: 1.0,
    EXPLICIT: 0.9,
    INFERRED: 0.6,
    SPECULATIVE: 0.3,
}
EXTRACTION_CONTEXTS = tuple(PRIOR_MEANS)

#: Pseudo-count of the prior (α + β before any evidence). About ten full-weight observations are
#: needed to overwhelm the prior: lower makes the posterior twitchy, higher makes corroboration
#: too slow to register (recall-echo's conventional weak-prior choice).
CONCENTRATION = 10.0

# --- SPEC §13: evidence ---------------------------------------------------------------------------
CORROBORATE = "corroborate"
CONTRADICT = "contradict"
EVIDENCE_KINDS = (CORROBORATE, CONTRADICT)

EXTERNAL = "external"
USER = "user"
SELF = "self"

#: Pseudo-observations one piece of evidence is worth, by who produced it. An external check counts
#: in full, a user's word nearly so; the agent vouching for its own edge is almost worthless, since
#: it is the very source whose extraction is in doubt.
PROVENANCE_WEIGHTS: dict[str, float] = {
    EXTERNAL: 1.0,
    USER: 0.8,
    SELF: 0.05,
}
PROVENANCES = tuple(PROVENANCE_WEIGHTS)

#: Evidence from these provenances is independent of the agent: only it resets the decay clock and
#: only it counts for calibration.
INDEPENDENT_PROVENANCES = frozenset({EXTERNAL, USER})

# --- SPEC §13: read-time decay --------------------------------------------------------------------
#: Effective confidence halves every 90 days without independent corroboration.
HALF_LIFE_DAYS = 90.0
#: Decay alone never takes an edge below this: stale edges rank low but stay queryable; deleting
#: them is a separate, explicit decision.
DECAY_FLOOR = 0.05
SECONDS_PER_DAY = 86400.0

# --- SPEC §13: graph expansion --------------------------------------------------------------------
#: Edges whose effective confidence is below this are not followed: past it, products are noise.
EXPANSION_MIN_EDGE = 0.1
#: Neighbours whose score (seed score · edge effective confidence) is below this are dropped.
EXPANSION_MIN_SCORE = 0.1

#: Object and edge ids: the services pass UUIDs, tests may pass strings; one call uses one kind,
#: since results are ordered by id.
Id = str | UUID


class EvidenceError(ValueError):
    """A value the evidence model does not know. The API maps it to 400 on ``field``."""

    status = 400

    def __init__(self, message: str, *, field: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.code = code


# --- plain values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EdgePosterior:
    """What an edge's evidence log folds to.

    Iterable, so ``alpha, beta, last = fold_edge(...)`` unpacks it like the (α, β, clock) triple.
    """

    alpha: float
    beta: float
    last_corroborated_at: datetime | None = None

    def __iter__(self) -> Iterator[float | datetime | None]:
        return iter((self.alpha, self.beta, self.last_corroborated_at))


@dataclass(frozen=True)
class ExpansionEdge:
    """An edge as graph expansion sees it: effective confidence already computed at ``now``."""

    id: Id
    source: Id
    target: Id
    effective: float


@dataclass(frozen=True)
class ExpansionResult:
    """A neighbour reached in one hop; ``path`` holds the edge ids of its best path."""

    object_id: Id
    score: float
    path: tuple[Id, ...]
    seed_id: Id


@dataclass(frozen=True)
class EdgeRecord:
    """One edge for calibration: how it was extracted and its evidence as (kind, provenance)."""

    extraction_context: str
    evidence: Sequence[tuple[str, str | None]] = ()


@dataclass(frozen=True)
class CalibrationRow:
    """One extraction context's prior against what independent evidence later showed.

    ``observed`` and ``difference`` are None when no external or user evidence exists yet: "no
    data" must not read as "perfectly calibrated" or "always wrong".
    """

    extraction_context: str
    prior_mean: float
    edges: int
    observations: int
    corroborations: int
    observed: float | None
    difference: float | None


# --- priors and evidence --------------------------------------------------------------------------


def prior(extraction_context: str) -> tuple[float, float]:
    """(α, β) before any evidence.

    β is computed as CONCENTRATION − α, equal to 10·(1 − m) in exact arithmetic, so that α + β is
    exactly the concentration in floating point too (10·(1 − 0.9) is 0.9999999999999998).
    """
    try:
        m = PRIOR_MEANS[extraction_context]
    except (KeyError, TypeError):
        raise EvidenceError(
            f"Unknown extraction_context {extraction_context!r}; "
            f"expected one of {', '.join(EXTRACTION_CONTEXTS)}.",
            field="extraction_context",
            code="unknown_extraction_context",
        ) from None
    alpha = CONCENTRATION * m
    return alpha, CONCENTRATION - alpha


def normalize_provenance(provenance: str | None) -> str:
    """Missing provenance is the agent's own word (SPEC §13): it must not count as independent.

    Only None is "missing"; any other unknown word, including "", is refused so a typo cannot
    silently downgrade a user's evidence to self.
    """
    if provenance is None:
        return SELF
    if provenance not in PROVENANCE_WEIGHTS:
        raise EvidenceError(
            f"Unknown provenance {provenance!r}; expected one of {', '.join(PROVENANCES)}.",
            field="provenance",
            code="unknown_provenance",
        )
    return provenance


def provenance_weight(provenance: str | None) -> float:
    return PROVENANCE_WEIGHTS[normalize_provenance(provenance)]


def _check_kind(kind: str) -> str:
    if kind not in EVIDENCE_KINDS:
        raise EvidenceError(
            f"Unknown evidence kind {kind!r}; expected one of {', '.join(EVIDENCE_KINDS)}.",
            field="kind",
            code="unknown_evidence_kind",
        )
    return kind


def apply_evidence(
    alpha: float, beta: float, kind: str, provenance: str | None
) -> tuple[float, float]:
    """Conjugate update with a fractional pseudo-observation, so weak sources move it less."""
    _check_kind(kind)
    w = provenance_weight(provenance)
    if kind == CORROBORATE:
        return alpha + w, beta
    return alpha, beta + w


def resets_clock(kind: str, provenance: str | None) -> bool:
    """Only independent corroboration keeps an edge fresh; otherwise the agent could stop its own
    edges from ever decaying by corroborating them itself (SPEC §13)."""
    _check_kind(kind)
    return kind == CORROBORATE and normalize_provenance(provenance) in INDEPENDENT_PROVENANCES


# --- the posterior as moments ---------------------------------------------------------------------


def mean(alpha: float, beta: float) -> float:
    """α/(α+β); 0.5 without any mass, the uninformed middle rather than a division by zero."""
    total = alpha + beta
    if total <= 0:
        return 0.5
    return alpha / total


def variance(alpha: float, beta: float) -> float:
    """αβ/((α+β)²(α+β+1)); 0.25 without any mass.

    0.25 is the formula's limit as α = β → 0 (the same limit that gives the mean its 0.5) and the
    largest variance any distribution on [0, 1] can have: no evidence must never read as
    certainty, which 0.0 would. No edge built by ``prior`` and ``apply_evidence`` gets here.
    """
    total = alpha + beta
    if total <= 0:
        return 0.25
    return (alpha * beta) / (total * total * (total + 1.0))


# --- read-time decay ------------------------------------------------------------------------------


def days_between(since: datetime, now: datetime) -> float:
    """Fractional days; both datetimes must be timezone-aware (mixing raises TypeError)."""
    return (now - since).total_seconds() / SECONDS_PER_DAY


def decayed(mean_value: float, days: float) -> float:
    """Staleness on top of the posterior: evidence and recency stay separate quantities.

    Zero or negative days (an "as of" before the last corroboration, or clock skew) apply no decay
    and no floor, so a fresh edge reads exactly as its posterior mean.
    """
    if days <= 0:
        return mean_value
    return max(DECAY_FLOOR, mean_value * 0.5 ** (days / HALF_LIFE_DAYS))


def effective_confidence(
    alpha: float,
    beta: float,
    last_corroborated_at: datetime | None,
    created_at: datetime,
    now: datetime,
) -> float:
    """Computed at read time for any ``now``, so "as of T" is this function evaluated at T."""
    since = last_corroborated_at if last_corroborated_at is not None else created_at
    return decayed(mean(alpha, beta), days_between(since, now))


def path_confidence(confidences: Iterable[float]) -> float:
    """Edges are treated as independent, so long chains of weak edges attenuate by themselves."""
    return math.prod(confidences, start=1.0)


# --- folding an edge's evidence log ---------------------------------------------------------------


def initial_edge(extraction_context: str) -> EdgePosterior:
    """A new edge: the prior, with the clock running from ``created_at``."""
    alpha, beta = prior(extraction_context)
    return EdgePosterior(alpha, beta, None)


def step_edge(
    state: EdgePosterior, kind: str, provenance: str | None, ts: datetime
) -> EdgePosterior:
    """One EDGE_EVIDENCE operation; the live service and replay both go through here.

    The clock only moves forward: a late-recorded corroboration with an older timestamp must not
    make an edge look staler than a newer corroboration already made it.
    """
    alpha, beta = apply_evidence(state.alpha, state.beta, kind, provenance)
    last = state.last_corroborated_at
    if resets_clock(kind, provenance) and (last is None or ts > last):
        last = ts
    return EdgePosterior(alpha, beta, last)


def fold_edge(
    extraction_context: str,
    evidence_events: Iterable[tuple[str, str | None, datetime]],
) -> EdgePosterior:
    """An edge's posterior from its prior and its ordered (kind, provenance, ts) evidence.

    Replaying a prefix of the log answers "what was the posterior as of T" (SPEC §13).
    """
    state = initial_edge(extraction_context)
    for kind, provenance, ts in evidence_events:
        state = step_edge(state, kind, provenance, ts)
    return state


# --- graph expansion ------------------------------------------------------------------------------


def expand_graph(
    seeds: Mapping[Id, float],
    edges: Iterable[ExpansionEdge],
    excluded: Iterable[Id] = (),
) -> list[ExpansionResult]:
    """One hop, both directions, scored as seed score · edge effective confidence (SPEC §13).

    ``excluded`` holds DEPRECATED objects: they are neither offered nor walked through. Seeds are
    left out because the caller already has them. A neighbour reached several ways keeps its best
    path; equal scores fall back to the smaller edge id so results do not depend on edge order.
    """
    skip = set(excluded)
    best: dict[Id, ExpansionResult] = {}
    for edge in edges:
        if edge.effective < EXPANSION_MIN_EDGE:
            continue
        if edge.source in skip or edge.target in skip:
            continue
        for seed_id, neighbour in ((edge.source, edge.target), (edge.target, edge.source)):
            if seed_id not in seeds or neighbour in seeds:
                continue
            score = seeds[seed_id] * edge.effective
            if score < EXPANSION_MIN_SCORE:
                continue
            current = best.get(neighbour)
            if (
                current is None
                or score > current.score
                or (score == current.score and edge.id < current.path[0])
            ):
                best[neighbour] = ExpansionResult(neighbour, score, (edge.id,), seed_id)
    return sorted(best.values(), key=lambda r: (-r.score, r.object_id))


# --- calibration ----------------------------------------------------------------------------------


def calibration(records: Iterable[EdgeRecord]) -> list[CalibrationRow]:
    """Each extraction context's prior against the share of independent evidence that corroborated.

    Only external and user evidence counts: the agent agreeing with itself says nothing about
    whether its SPECULATIVE claims hold up 30% of the time. Counts, not weights, make the share,
    so it reads as "how often did a check confirm it". Every context gets a row, in a fixed order,
    so an empty one is visible rather than missing.
    """
    edges = dict.fromkeys(EXTRACTION_CONTEXTS, 0)
    observations = dict.fromkeys(EXTRACTION_CONTEXTS, 0)
    corroborations = dict.fromkeys(EXTRACTION_CONTEXTS, 0)
    for record in records:
        context = record.extraction_context
        prior(context)  # validates the context
        edges[context] += 1
        for kind, provenance in record.evidence:
            _check_kind(kind)
            if normalize_provenance(provenance) not in INDEPENDENT_PROVENANCES:
                continue
            observations[context] += 1
            if kind == CORROBORATE:
                corroborations[context] += 1
    rows = []
    for context in EXTRACTION_CONTEXTS:
        prior_mean = mean(*prior(context))
        n = observations[context]
        observed = corroborations[context] / n if n else None
        rows.append(
            CalibrationRow(
                extraction_context=context,
                prior_mean=prior_mean,
                edges=edges[context],
                observations=n,
                corroborations=corroborations[context],
                observed=observed,
                difference=None if observed is None else observed - prior_mean,
            )
        )
    return rows
