"""Reads of the review queue (SPEC §8)."""

from __future__ import annotations

from django.db.models import F

from feedback.selectors import review_queue
from rms.models import Namespace

# --- review queue (SPEC §8) -------------------------------------------------------------------

REVIEW_SORTS = {
    "usage_ratio": "aggregate__usage_ratio",
    "injections": "aggregate__total_injections",
    "confidence": "confidence",
    "last_use": "aggregate__last_use_at",
    "tokens": "aggregate__total_token_cost",
}
REVIEW_DEFAULT_SORT = "usage_ratio"


def review_rows(
    namespace: Namespace, *, sort: str, descending: bool, epistemic_type: str | None = None
):
    """The SPEC §8 queue of one namespace, ordered by a column of the table."""
    qs = review_queue(namespace)
    if epistemic_type:
        qs = qs.filter(epistemic_type=epistemic_type)
    field_name = REVIEW_SORTS.get(sort, REVIEW_SORTS[REVIEW_DEFAULT_SORT])
    order = (
        F(field_name).desc(nulls_last=True) if descending else F(field_name).asc(nulls_first=True)
    )
    return qs.order_by(order, "pk")
