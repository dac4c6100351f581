"""Plotly figures as plain dicts, from plain data (STYLE: charts.py builds, views render).

No Django and no ``plotly.graph_objects`` here: validating a figure through graph_objects costs
tens of milliseconds per chart, and these dicts are exactly what ``Plotly.newPlot`` takes. The
browser draws them with the locally served plotly.min.js, ``{displayModeBar: false,
responsive: true}`` (dashboard.js).

House rules for the look: one accent hue for data, grey for references (thresholds, priors,
secondary series), and the state colours (ok / alert) only where a point *is* a state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from rms import policy

ACCENT = "#3b5bdb"
ACCENT_SOFT = "rgba(59, 91, 219, 0.16)"
ACCENT_MID = "#91a7ff"
GREY = "#667085"
GREY_SOFT = "#d0d5dd"
GRID = "#eaecf0"
INK = "#344054"
ALERT = "#c4320a"
OK = "#067647"
FONT = {
    "family": 'Inter, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif',
    "size": 12,
    "color": INK,
}
#: A fixed set of dash styles to tell compared runs apart without adding colours.
DASHES = ("solid", "dash", "dot", "dashdot")


def _axis(**kw) -> dict:
    axis = {
        "gridcolor": GRID,
        "zeroline": False,
        "linecolor": GREY_SOFT,
        "tickcolor": GREY_SOFT,
        "ticks": "outside",
        "ticklen": 4,
        "automargin": True,
        "title": {"font": {"size": 12, "color": GREY}, "standoff": 8},
    }
    for key, value in kw.items():
        if key == "title":
            axis["title"] = {**axis["title"], "text": value}
        else:
            axis[key] = value
    return axis


def _layout(height: int = 280, **kw) -> dict:
    layout = {
        "height": height,
        "margin": {"l": 8, "r": 12, "t": 12, "b": 8},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": FONT,
        "showlegend": False,
        "hovermode": "closest",
        "hoverlabel": {"bgcolor": "#101828", "bordercolor": "#101828", "font": {"color": "#fff"}},
        "bargap": 0.08,
    }
    layout.update(kw)
    return layout


def _legend() -> dict:
    return {
        "showlegend": True,
        "legend": {
            "orientation": "h",
            "x": 0,
            "y": 1.02,
            "yanchor": "bottom",
            "font": {"size": 11, "color": GREY},
        },
    }


def _iso(ts: datetime) -> str:
    return ts.isoformat()


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
        "layout": _layout(
            height=240,
            xaxis=_axis(title="lifetime usage ratio", range=[0, 1], dtick=0.1, tickformat=".1f"),
            yaxis=_axis(title="objects", rangemode="tozero", tickformat=","),
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
        "layout": _layout(
            height=240,
            barmode="stack",
            xaxis=_axis(title="confidence", range=[0, 1], dtick=0.1, tickformat=".1f"),
            yaxis=_axis(title="objects", rangemode="tozero", tickformat=","),
            **_legend(),
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
    x = [_iso(b) for b in buckets]
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
        layout[f"xaxis{suffix}"] = _axis(
            domain=[x0, x1], anchor=ya, type="date", showgrid=False, **ticks
        )
        layout[f"yaxis{suffix}"] = _axis(domain=[y0, y1], anchor=xa, rangemode="tozero")
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
        "layout": _layout(
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


# --- object ---------------------------------------------------------------------------------------

#: Effective salience decays between operations; these many samples per gap draw the curve.
DECAY_SAMPLES = 12
DECAY_MIN_GAP = timedelta(hours=6)


def trajectory(
    points: Sequence, created_at: datetime, end: datetime, as_of: datetime | None = None
) -> dict:
    """Confidence (a step line: it changes only at operations) and effective salience (decaying
    between operations, sampled) over time; each operation a marker with its op and signal."""
    if not points:
        return {"data": [], "layout": _layout()}
    xs = [_iso(p.ts) for p in points]
    hover = [
        f"#{p.seq} {p.op_type}" + (f" · {p.signal_type}" if p.signal_type else "") for p in points
    ]
    sal_x, sal_y = [], []
    for k, p in enumerate(points):
        sal_x.append(_iso(p.ts))
        sal_y.append(round(p.salience_effective, 4))
        nxt = points[k + 1].ts if k + 1 < len(points) else end
        if nxt - p.ts >= DECAY_MIN_GAP:
            step = (nxt - p.ts) / DECAY_SAMPLES
            for j in range(1, DECAY_SAMPLES + 1):
                t = p.ts + step * j
                sal_x.append(_iso(t))
                sal_y.append(round(policy.salience_effective(p.state, created_at, t), 4))
    conf_x = [*xs, _iso(end)] if end > points[-1].ts else xs
    conf_y = [p.confidence for p in points]
    if len(conf_x) > len(conf_y):
        conf_y.append(points[-1].confidence)
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "confidence",
            "x": conf_x,
            "y": conf_y,
            "line": {"color": ACCENT, "width": 2, "shape": "hv"},
            "hoverinfo": "skip",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "effective salience",
            "x": sal_x,
            "y": sal_y,
            "line": {"color": GREY, "width": 1.5, "dash": "dot"},
            "hoverinfo": "skip",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "operation",
            "x": xs,
            "y": [p.confidence for p in points],
            "marker": {"color": ACCENT, "size": 6, "line": {"color": "#fff", "width": 1}},
            "customdata": [
                [h, round(p.confidence, 3), round(p.salience_effective, 3)]
                for h, p in zip(hover, points, strict=True)
            ],
            "hovertemplate": (
                "%{customdata[0]}<br>%{x}<br>confidence %{customdata[1]:.3f}"
                "<br>effective salience %{customdata[2]:.3f}<extra></extra>"
            ),
            "showlegend": False,
        },
    ]
    shapes, annotations = [], []
    if as_of is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": _iso(as_of),
                "x1": _iso(as_of),
                "y0": 0,
                "y1": 1,
                "line": {"color": INK, "width": 1, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "x": _iso(as_of),
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "text": "as of",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "top",
                "font": {"size": 11, "color": INK},
            }
        )
    return {
        "data": data,
        "layout": _layout(
            height=300,
            xaxis=_axis(type="date"),
            yaxis=_axis(range=[0, 1.02], tickformat=".1f"),
            shapes=shapes,
            annotations=annotations,
            **_legend(),
        ),
    }


# --- simulations ----------------------------------------------------------------------------------


def stability(series: Sequence[dict], max_extreme_share: float = 0.5) -> dict:
    """Confidence distribution per session (p10–p90 band, median, min and max) above the share
    of objects at an extreme, with the criterion's limit dashed."""
    x = [p["session"] for p in series]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": [p["max"] for p in series],
            "line": {"color": GREY_SOFT, "width": 1},
            "name": "min / max",
            "hovertemplate": "session %{x}<br>max %{y:.3f}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": [p["min"] for p in series],
            "line": {"color": GREY_SOFT, "width": 1},
            "showlegend": False,
            "hovertemplate": "session %{x}<br>min %{y:.3f}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": [p["p10"] for p in series],
            "line": {"color": ACCENT_MID, "width": 0.5},
            "showlegend": False,
            "hovertemplate": "session %{x}<br>p10 %{y:.3f}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": [p["p90"] for p in series],
            "line": {"color": ACCENT_MID, "width": 0.5},
            "fill": "tonexty",
            "fillcolor": ACCENT_SOFT,
            "name": "p10–p90",
            "hovertemplate": "session %{x}<br>p90 %{y:.3f}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": [p["p50"] for p in series],
            "line": {"color": ACCENT, "width": 2},
            "name": "median",
            "hovertemplate": "session %{x}<br>median %{y:.3f}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": [p["extreme_share"] for p in series],
            "xaxis": "x2",
            "yaxis": "y2",
            "line": {"color": INK, "width": 1.5, "shape": "hv"},
            "name": "share at an extreme",
            "hovertemplate": "session %{x}<br>%{y:.1%} at an extreme<extra></extra>",
        },
    ]
    return {
        "data": data,
        "layout": _layout(
            height=380,
            xaxis=_axis(domain=[0, 1], anchor="y", showticklabels=False),
            yaxis=_axis(domain=[0.36, 1], title="confidence", range=[0, 1.02], tickformat=".1f"),
            xaxis2=_axis(domain=[0, 1], anchor="y2", matches="x", title="session"),
            yaxis2=_axis(domain=[0, 0.26], title="at extreme", range=[0, 1], tickformat=".0%"),
            shapes=[
                {
                    "type": "line",
                    "xref": "x2 domain",
                    "yref": "y2",
                    "x0": 0,
                    "x1": 1,
                    "y0": max_extreme_share,
                    "y1": max_extreme_share,
                    "line": {"color": GREY, "width": 1, "dash": "dash"},
                }
            ],
            **_legend(),
        ),
    }


def precision(runs: Sequence[tuple[str, Sequence[dict]]]) -> dict:
    """precision@5 per session for one or more runs (told apart by dash, one hue), above the mean
    confidence of the known-relevant and the known-wrong objects of the first run."""
    data = []
    for k, (label, series) in enumerate(runs):
        dash = DASHES[k % len(DASHES)]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [p["session"] for p in series],
                "y": [p["precision_at_5"] for p in series],
                "line": {
                    "color": ACCENT if k == 0 else INK,
                    "width": 2 if k == 0 else 1.5,
                    "dash": dash,
                    "shape": "hv",
                },
                "name": f"p@5 · {label}",
                "hovertemplate": f"{label}<br>session %{{x}}<br>p@5 %{{y:.2f}}<extra></extra>",
            }
        )
    if runs:
        label, series = runs[0]
        x = [p["session"] for p in series]
        for key, name, color in (
            ("mean_confidence_relevant", "relevant", ACCENT),
            ("mean_confidence_wrong", "known-wrong", GREY),
        ):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": x,
                    "y": [p.get(key) for p in series],
                    "xaxis": "x2",
                    "yaxis": "y2",
                    "line": {"color": color, "width": 1.5},
                    "name": f"mean confidence, {name}",
                    "hovertemplate": f"{name}<br>session %{{x}}<br>%{{y:.3f}}<extra></extra>",
                }
            )
    return {
        "data": data,
        "layout": _layout(
            height=380,
            xaxis=_axis(domain=[0, 1], anchor="y", showticklabels=False),
            yaxis=_axis(domain=[0.45, 1], title="precision@5", range=[0, 1.05], tickformat=".1f"),
            xaxis2=_axis(domain=[0, 1], anchor="y2", matches="x", title="session"),
            yaxis2=_axis(domain=[0, 0.36], title="confidence", range=[0, 1.02], tickformat=".1f"),
            **_legend(),
        ),
    }


# --- evidence -------------------------------------------------------------------------------------


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% Wilson score interval of a share: honest error bars for small counts."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def calibration(rows: Sequence[dict]) -> dict:
    """Prior against observed, one row per extraction context (a dot plot: the names sit on the
    axis, so nothing overlaps): the prior as a hollow grey diamond, the observed share of
    corroborations among independent checks as a filled dot with its 95% Wilson interval, a
    thin line between the two, and the count of checks at the right."""
    ordered = list(rows)[::-1]  # AUTHORITATIVE on top
    labels = [r["extraction_context"].lower() for r in ordered]
    seen = [r for r in ordered if r.get("observed") is not None]
    link_x, link_y = [], []
    for r in seen:
        link_x += [r["prior_mean"], r["observed"], None]
        link_y += [r["extraction_context"].lower(), r["extraction_context"].lower(), None]
    plus, minus = [], []
    for r in seen:
        lo, hi = wilson_interval(r["corroborations"], r["observations"])
        plus.append(hi - r["observed"])
        minus.append(r["observed"] - lo)
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": link_x,
            "y": link_y,
            "line": {"color": GREY_SOFT, "width": 2},
            "hoverinfo": "skip",
            "showlegend": False,
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "prior",
            "x": [r["prior_mean"] for r in ordered],
            "y": labels,
            "marker": {"symbol": "diamond-open", "size": 12, "color": GREY, "line": {"width": 2}},
            "hovertemplate": "%{y}<br>prior %{x:.2f}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "observed share corroborated (95% interval)",
            "x": [r["observed"] for r in seen],
            "y": [r["extraction_context"].lower() for r in seen],
            "error_x": {
                "type": "data",
                "symmetric": False,
                "array": plus,
                "arrayminus": minus,
                "color": ACCENT_MID,
                "thickness": 1.5,
                "width": 5,
            },
            "marker": {"color": ACCENT, "size": 11, "line": {"color": "#fff", "width": 1}},
            "customdata": [[r["corroborations"], r["observations"], r["edges"]] for r in seen],
            "hovertemplate": (
                "%{y}<br>observed %{x:.3f}<br>%{customdata[0]} of %{customdata[1]} independent "
                "checks corroborated<br>%{customdata[2]} edges<extra></extra>"
            ),
        },
    ]
    annotations = [
        {
            "x": 1.0,
            "y": r["extraction_context"].lower(),
            "xref": "paper",
            "yref": "y",
            "xanchor": "left",
            "xshift": 10,
            "text": (
                f"{r['corroborations']} / {r['observations']} checks"
                if r["observations"]
                else "no checks yet"
            ),
            "showarrow": False,
            "font": {"size": 11, "color": GREY},
        }
        for r in ordered
    ]
    return {
        "data": data,
        "layout": _layout(
            height=300,
            margin={"l": 8, "r": 96, "t": 12, "b": 8},
            xaxis=_axis(title="share", range=[0, 1.02], dtick=0.1, tickformat=".1f"),
            yaxis=_axis(
                categoryorder="array", categoryarray=labels, showgrid=False, ticks="", ticklen=0
            ),
            annotations=annotations,
            **_legend(),
        ),
    }


def detection_sweep(rows: Sequence[dict], chosen: float) -> dict:
    """Precision, recall and F1 of REFERENCED against the detection threshold, the threshold in
    use marked."""
    x = [r["threshold"] for r in rows]
    data = []
    for key, color, dash in (
        ("precision", ACCENT, "solid"),
        ("recall", INK, "dash"),
        ("f1", GREY, "dot"),
    ):
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": x,
                "y": [r[key] for r in rows],
                "name": key if key != "f1" else "F1",
                "line": {"color": color, "width": 1.8, "dash": dash},
                "marker": {"size": 5, "color": color},
                "hovertemplate": f"threshold %{{x:.2f}}<br>{key} %{{y:.3f}}<extra></extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            height=360,
            xaxis=_axis(title="REFERENCED threshold", dtick=0.1, tickformat=".2f"),
            yaxis=_axis(range=[0, 1.05], tickformat=".1f"),
            shapes=[
                {
                    "type": "line",
                    "xref": "x",
                    "yref": "paper",
                    "x0": chosen,
                    "x1": chosen,
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": GREY, "width": 1, "dash": "dash"},
                }
            ],
            **_legend(),
        ),
    }
