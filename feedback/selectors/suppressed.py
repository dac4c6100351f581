"""Reads of suppressed memories: a namespace's eligible objects that cannot surface
(``feedback.suppression`` holds the rules)."""

from __future__ import annotations

from datetime import datetime

from feedback import retrieval, suppression, utility
from feedback.selectors import namespace_profile
from rms.models import MemoryObject, Namespace
from rms.policy import DEPRECATED

#: Rows fetched at a time from the database while reading a namespace's objects.
CHUNK = 5000
#: The columns of an object and its aggregate that its ranking inputs need, in
#: ``retrieval.RankingInputs`` order after the id.
_COLUMNS = (
    "id",
    "epistemic_type",
    "condition_state",
    "confidence",
    "salience_base",
    "reinforcement_boost",
    "decay_profile",
    "pinned",
    "last_reinforced_at",
    "created_at",
    "aggregate__utility",
    "aggregate__uses",
    "aggregate__last_use_at",
)


def suppressed_in(
    ns: Namespace,
    now: datetime,
    *,
    salience_below: float = suppression.DEFAULT_SALIENCE_BELOW,
    k: int = suppression.DEFAULT_K,
) -> tuple[retrieval.Profile, list[suppression.Finding]]:
    """The namespace's profile and its suppressed objects, most buried first (lowest best
    score, then id). One pass over the namespace's active objects, read as plain columns (no
    model instances: at 90k objects those cost most of the time). 409 when the stored profile
    is invalid."""
    profile = namespace_profile(ns)
    rows = (
        MemoryObject.objects.filter(namespace=ns)
        .exclude(epistemic_type=DEPRECATED)
        .values_list(*_COLUMNS)
        .iterator(chunk_size=CHUNK)
    )

    def inputs():
        for oid, *state, util, uses, last_use in rows:
            yield (
                str(oid),
                retrieval.RankingInputs(
                    *state,
                    # No aggregate yet: what ``ranking_inputs`` gives an object never injected.
                    utility=utility.UTILITY_START if util is None else util,
                    uses=uses or 0,
                    last_use_at=last_use,
                ),
            )

    findings = suppression.suppressed(inputs(), profile, now, salience_below=salience_below, k=k)
    findings.sort(key=lambda f: (f.best_score, f.object_id))
    return profile, findings


def with_objects(findings: list[suppression.Finding]) -> list[dict]:
    """``{"object": MemoryObject, "finding": Finding}`` for one page of findings, in order."""
    objects = MemoryObject.objects.in_bulk([f.object_id for f in findings])
    by_id = {str(pk): obj for pk, obj in objects.items()}
    return [{"object": by_id[f.object_id], "finding": f} for f in findings if f.object_id in by_id]
