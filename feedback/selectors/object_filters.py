"""Object-listing filters and sorts on the feedback aggregate, registered with ``rms`` (which
never imports ``feedback``) for ``GET /objects`` and the dashboard's objects browser.

``in_alert`` is membership of the namespace's review queue (SPEC §8): an active object injected
at least ``REVIEW_MIN_INJECTIONS`` times with a usage ratio below ``REVIEW_USAGE_BELOW`` — the
object-level counterpart of a namespace's waste alerts, and what an operator acts on.
"""

from __future__ import annotations

from django.db.models import Q

from feedback.selectors import REVIEW_MIN_INJECTIONS, REVIEW_USAGE_BELOW
from rms.extensions import register_object_filter, register_object_sort
from rms.policy import DEPRECATED

IN_ALERT = Q(
    aggregate__usage_ratio__lt=REVIEW_USAGE_BELOW,
    aggregate__total_injections__gte=REVIEW_MIN_INJECTIONS,
) & ~Q(epistemic_type=DEPRECATED)

SORTS = {
    "usage_ratio": "aggregate__usage_ratio",
    "injections": "aggregate__total_injections",
    "last_use": "aggregate__last_use_at",
    "tokens": "aggregate__total_token_cost",
}


def in_alert(value: bool) -> Q:
    # An object without an aggregate was never injected, so never in the queue.
    return IN_ALERT if value else ~IN_ALERT | Q(aggregate__isnull=True)


def register() -> None:
    register_object_filter("usage_ratio_min", "unit", lambda v: Q(aggregate__usage_ratio__gte=v))
    register_object_filter("usage_ratio_max", "unit", lambda v: Q(aggregate__usage_ratio__lte=v))
    register_object_filter("in_alert", "bool", in_alert)
    for name, path in SORTS.items():
        register_object_sort(name, path)
