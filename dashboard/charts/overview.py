"""The overview page's figures: usage and confidence histograms, metric trends, sparklines."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from dashboard.charts.style import ACCENT, ALERT, GREY, base_axis, base_layout, iso, with_legend

# --- overview -------------------------------------------------------------------------------------


def usage_histogram(counts: Sequence[int], review_below: float = 0.10) -> dict:
    """Objects by lifetime usage ratio (10 bins); the review-queue range is shaded."""
    n = len(counts)
    width = 1.0 / n
    x = [(i + 0.5) * width for i in range(n)]
    labels = [f"{i * width:.1f}–{(i + 1) * width:.1f}" for i in range(n)]
    return {
        "data": [
            {
                "type": "bar",
                "x": x,
                "y": list(counts),
                "width": [width * 0.92] * n,
                "marker": {"color": ACCENT},
                "customdata": labels,
                "hovertemplate": "usage ratio %{customdata}<br>%{y:,} objects<extra></extra>",
            }
        ],
        "layout": base_layout(
            height=240,
            xaxis=base_axis(
                title="lifetime usage ratio", range=[0, 1], dtick=0.1, tickformat=".1f"
            ),
            yaxis=base_axis(title="objects", rangemode="tozero", tickformat=","),
            shapes=[
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": 0,
                    "x1": review_below,
                    "y0": 0,
                    "y1": 1,
                    "fillcolor": "rgba(102,112,133,0.10)",
                    "line": {"width": 0},
                    "layer": "below",
                }
            ],
            annotations=[
                {
                    "x": review_below,
                    "y": 1,
                    "xref": "x",
                    "yref": "paper",
                    "text": f"review < {review_below:.2f}",
                    "showarrow": False,
                    "xanchor": "left",
                    "yanchor": "top",
                    "font": {"size": 11, "color": GREY},
                }
            ],
        ),
    }


#: Lightest to darkest: the order of the stack, from speculative to observed.
_TYPE_ORDER = ("UNVERIFIED", "HYPOTHETICAL", "INFERRED", "CONDITIONAL", "ASSERTED", "OBSERVED")
_TYPE_SHADES = ("#dbe4ff", "#bac8ff", "#91a7ff", "#748ffc", "#4c6ef5", "#364fc7")


def confidence_histogram(by_type: dict[str, Sequence[int]]) -> dict:
    """Active objects by confidence (bins of 0.05), stacked by epistemic type in shades of the
    one accent, with each type's reinforcement ceiling marked."""
    bins = len(next(iter(by_type.values()))) if by_type else 20
    width = 1.0 / bins
    x = [(i + 0.5) * width for i in range(bins)]
    labels = [f"{i * width:.2f}–{(i + 1) * width:.2f}" for i in range(bins)]
    data = []
    for etype, shade in zip(_TYPE_ORDER, _TYPE_SHADES, strict=True):
        counts = by_type.get(etype)
        if not counts or not any(counts):
            continue
        data.append(
            {
                "type": "bar",
                "name": etype.lower(),
                "x": x,
                "y": list(counts),
                "width": [width * 0.92] * bins,
                "marker": {"color": shade},
                "customdata": labels,
                "hovertemplate": (
                    f"{etype}<br>confidence %{{customdata}}<br>%{{y:,}} objects<extra></extra>"
                ),
            }
        )
    return {
        "data": data,
        "layout": base_layout(
            height=240,
            barmode="stack",
            xaxis=base_axis(title="confidence", range=[0, 1], dtick=0.1, tickformat=".1f"),
            yaxis=base_axis(title="objects", rangemode="tozero", tickformat=","),
            **with_legend(),
        ),
    }


METRIC_LABELS = {
    "mean_usage_ratio": "Mean usage ratio",
    "high_correction_rate": "High correction rate",
    "budget_waste_ratio": "Budget waste ratio",
    "unused_injection_rate": "Unused injection rate",
}


def metric_trends(
    buckets: Sequence[datetime],
    values: dict[str, Sequence[float | None]],
    alert: dict[str, Sequence[bool]],
    thresholds: dict[str, float],
) -> dict:
    """Small multiples, one per metric: the snapshot value per bucket, its threshold dashed, and
    the buckets in alert marked in the alert colour."""
    names = list(METRIC_LABELS)
    data, shapes, annotations = [], [], []
    layout: dict = {}
    x = [iso(b) for b in buckets]
    # One-line tick labels without the year, and none drawn past its own chart: Plotly's
    # default two-line date labels ran into the neighbouring chart's labels.
    hourly = len(buckets) > 1 and buckets[-1] - buckets[0] <= timedelta(days=2)
    ticks = {
        "tickformat": "%H:%M<br>%b %-d" if hourly else "%b %-d",
        "nticks": 4 if hourly else 6,
        "ticklabeloverflow": "hide past domain",
    }
    for k, name in enumerate(names):
        row, col = divmod(k, 2)
        suffix = "" if k == 0 else str(k + 1)
        xa, ya = f"x{suffix}", f"y{suffix}"
        x0, x1 = (0.0, 0.46) if col == 0 else (0.54, 1.0)
        y0, y1 = (0.58, 1.0) if row == 0 else (0.0, 0.40)
        layout[f"xaxis{suffix}"] = base_axis(
            domain=[x0, x1], anchor=ya, type="date", showgrid=False, **ticks
        )
        layout[f"yaxis{suffix}"] = base_axis(domain=[y0, y1], anchor=xa, rangemode="tozero")
        # Four decimals are more than a chart shows, and keep the page light.
        ys = [None if v is None else round(v, 4) for v in values.get(name, [])]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": x,
                "y": ys,
                "xaxis": xa,
                "yaxis": ya,
                "line": {"color": ACCENT, "width": 1.6},
                "connectgaps": False,
                "hovertemplate": f"{METRIC_LABELS[name]}<br>%{{x}}<br>%{{y:.3f}}<extra></extra>",
            }
        )
        flags = list(alert.get(name, []))
        ax = [xi for xi, f, yi in zip(x, flags, ys, strict=False) if f and yi is not None]
        ay = [yi for f, yi in zip(flags, ys, strict=False) if f and yi is not None]
        if ax:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "x": ax,
                    "y": ay,
                    "xaxis": xa,
                    "yaxis": ya,
                    "marker": {"color": ALERT, "size": 4},
                    "hovertemplate": "alert<br>%{x}<br>%{y:.3f}<extra></extra>",
                }
            )
        threshold = thresholds.get(name)
        if threshold is not None:
            shapes.append(
                {
                    "type": "line",
                    "xref": f"{xa} domain",
                    "yref": ya,
                    "x0": 0,
                    "x1": 1,
                    "y0": threshold,
                    "y1": threshold,
                    "line": {"color": GREY, "width": 1, "dash": "dash"},
                }
            )
        annotations.append(
            {
                "text": f"<b>{METRIC_LABELS[name]}</b>"
                + (
                    f"  <span style='color:{GREY}'>threshold {threshold:.2f}</span>"
                    if threshold is not None
                    else ""
                ),
                "xref": f"{xa} domain",
                "yref": f"{ya} domain",
                "x": 0,
                "y": 1.0,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 12},
            }
        )
    return {
        "data": data,
        "layout": base_layout(
            height=400,
            margin={"l": 8, "r": 12, "t": 24, "b": 8},
            shapes=shapes,
            annotations=annotations,
            **layout,
        ),
    }


def sparkline_path(
    values: Sequence[float | None],
    threshold: float | None = None,
    *,
    width: int = 160,
    height: int = 36,
    pad: float = 3.0,
) -> dict | None:
    """An SVG path for a server-rendered sparkline (no JS, no chart library), with the
    threshold's y so it can be drawn as a reference line. None without at least one value."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return None
    ys = [v for _, v in points]
    lo, hi = min(ys), max(ys)
    if threshold is not None:
        lo, hi = min(lo, threshold), max(hi, threshold)
    if math.isclose(lo, hi):
        lo, hi = lo - 0.05, hi + 0.05
    span_x = max(1, len(values) - 1)

    def sx(i: float) -> float:
        return round(pad + (width - 2 * pad) * i / span_x, 1)

    def sy(v: float) -> float:
        return round(height - pad - (height - 2 * pad) * (v - lo) / (hi - lo), 1)

    parts, prev = [], None
    for i, v in points:
        parts.append(("L" if prev is not None and i == prev + 1 else "M") + f"{sx(i)},{sy(v)}")
        prev = i
    last_i, last_v = points[-1]
    return {
        "d": " ".join(parts),
        "width": width,
        "height": height,
        "threshold_y": None if threshold is None else sy(threshold),
        "last_x": sx(last_i),
        "last_y": sy(last_v),
        "min": min(ys),
        "max": max(ys),
        "first": ys[0],
        "last": ys[-1],
    }
