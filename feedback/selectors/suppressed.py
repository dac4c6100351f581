"""Reads of suppressed memories: a namespace's eligible objects that cannot surface
(``feedback.suppression`` holds the rules)."""

from __future__ import annotations

from datetime import datetime

from feedback import retrieval, suppression
from feedback.models import FeedbackAggregate
from feedback.selectors import namespace_profile, ranking_inputs
from rms.models import MemoryObject, Namespace
from rms.policy import DEPRECATED

#: Most objects of a namespace read to decide what is suppressed (one pass over their rows).
CHUNK = 2000


def suppressed_in(
    ns: Namespace,
    now: datetime,
    *,
    salience_below: float = suppression.DEFAULT_SALIENCE_BELOW,
    k: int = suppression.DEFAULT_K,
) -> tuple[retrieval.Profile, list[dict]]:
    """The namespace's profile and its suppressed objects, most buried first (lowest best
    score, then id): each ``{"object": MemoryObject, "finding": Finding}``. 409 when the stored
    profile is invalid."""
    profile = namespace_profile(ns)
    objects = {}
    rows = []
    qs = MemoryObject.objects.filter(namespace=ns).exclude(epistemic_type=DEPRECATED)
    aggs = {
        a.object_id: a
        for a in FeedbackAggregate.objects.filter(namespace=ns).only(
            "object_id", "utility", "uses", "last_use_at"
        )
    }
    for obj in qs.iterator(chunk_size=CHUNK):
        objects[str(obj.pk)] = obj
        rows.append((str(obj.pk), ranking_inputs(obj, aggs.get(obj.pk))))
    findings = suppression.suppressed(rows, profile, now, salience_below=salience_below, k=k)
    findings.sort(key=lambda f: (f.best_score, f.object_id))
    return profile, [{"object": objects[f.object_id], "finding": f} for f in findings]
