"""Plotly figures as plain dicts, from plain data (STYLE: charts builds, views render), one module
per page and a shared style.

No Django and no ``plotly.graph_objects`` here: validating a figure through graph_objects costs
tens of milliseconds per chart, and these dicts are exactly what ``Plotly.newPlot`` takes. The
browser draws them with the locally served plotly.min.js, ``{displayModeBar: false,
responsive: true}`` (dashboard.js).

House rules for the look (``style``): one accent hue for data, grey for references (thresholds,
priors, secondary series), and the state colours (ok / alert) only where a point *is* a state.
"""

from dashboard.charts.evidence import calibration, detection_sweep, wilson_interval
from dashboard.charts.objects import DECAY_MIN_GAP, DECAY_SAMPLES, trajectory
from dashboard.charts.overview import (
    METRIC_LABELS,
    confidence_histogram,
    metric_trends,
    sparkline_path,
    usage_histogram,
)
from dashboard.charts.simulations import precision, stability

__all__ = [
    "DECAY_MIN_GAP",
    "DECAY_SAMPLES",
    "METRIC_LABELS",
    "calibration",
    "confidence_histogram",
    "detection_sweep",
    "metric_trends",
    "precision",
    "sparkline_path",
    "stability",
    "trajectory",
    "usage_histogram",
    "wilson_interval",
]
