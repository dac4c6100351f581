"""Seeded, reproducible simulations of the feedback loop (SPEC §14, RFC-0008 §11, RFC-0009 §13),
one module per simulation: ``stability``, ``precision`` and the benchmark suite's exact ``checks``;
``common`` holds what they share.

Pure: no Django import, no database, no clock and no global random state. Every simulation builds
its own in-memory corpus, draws every random number from one ``random.Random(seed)``, moves
confidence only through ``rms.policy`` (the same functions the live services and replay call) and
ranks only through ``feedback.utility``, so a result is a function of its arguments alone and the
same seed gives an identical, JSON-serialisable result dict.

The RFC-0008 §11 benchmark suite's exact checks are here; its replay of 100 objects needs the
stored log, so ``feedback.suite`` runs them together with that check on the database.

Each simulation accepts ``progress(fraction)``, called with a non-decreasing fraction in (0, 1]
that ends at 1.0, so a worker can report how far it got.
"""

from feedback.simulations.checks import EXACT_CHECKS, check_result, exact_checks
from feedback.simulations.common import DEFAULT_SEED, Progress
from feedback.simulations.precision import FILLER, RELEVANT, TOP_K, WRONG, precision_simulation
from feedback.simulations.stability import (
    HISTOGRAM_BINS,
    MAX_EXTREME_SHARE,
    MIN_FINAL_SPREAD,
    NEAR_EXTREME,
    confidence_distribution,
    stability_simulation,
    stability_verdict,
)

__all__ = [
    "DEFAULT_SEED",
    "Progress",
    "EXACT_CHECKS",
    "FILLER",
    "HISTOGRAM_BINS",
    "MAX_EXTREME_SHARE",
    "MIN_FINAL_SPREAD",
    "NEAR_EXTREME",
    "RELEVANT",
    "TOP_K",
    "WRONG",
    "check_result",
    "confidence_distribution",
    "exact_checks",
    "precision_simulation",
    "stability_simulation",
    "stability_verdict",
]
