"""Reads of the evidence page: calibration per extraction context (SPEC §13)."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, OuterRef, Subquery
from django.db.models.fields.json import KT

from rms import evidence
from rms.models import Namespace, Operation, Relationship

# --- calibration (SPEC §13) -------------------------------------------------------------------


def calibration(namespace: Namespace) -> list[dict]:
    """``rms.edges.calibration`` in two grouped queries: edges per extraction context, and
    evidence per (context, kind, provenance) over the ``op_ns_type_ts`` index; the counts are
    then handed to the same pure ``rms.evidence.calibration``, so the rows are identical
    without reading every evidence operation into Python."""
    edges = dict(
        Relationship.objects.filter(namespace=namespace)
        .values("extraction_context")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("extraction_context", "n")
    )
    context_of = Relationship.objects.filter(pk=OuterRef("target_id")).values("extraction_context")[
        :1
    ]
    grouped = (
        Operation.objects.filter(namespace=namespace.name, op_type="EDGE_EVIDENCE")
        .annotate(
            ctx=Subquery(context_of), kind=KT("payload__kind"), prov=KT("payload__provenance")
        )
        .values("ctx", "kind", "prov")
        .annotate(n=Count("pk"))
        .order_by()
    )
    observed: dict[str, list] = defaultdict(list)
    for row in grouped:
        if row["ctx"] is not None:
            observed[row["ctx"]].extend([(row["kind"], row["prov"])] * row["n"])
    records = []
    for context, n in edges.items():
        # One record carries the context's evidence, the others only count as edges.
        records.append(evidence.EdgeRecord(context, tuple(observed.pop(context, ()))))
        records.extend(evidence.EdgeRecord(context) for _ in range(n - 1))
    return [row.__dict__ for row in evidence.calibration(records)]
