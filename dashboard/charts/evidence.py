"""The evidence page's figures: calibration per extraction context with Wilson intervals, and
the detection threshold sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dashboard.charts.style import (
    ACCENT,
    ACCENT_MID,
    GREY,
    GREY_SOFT,
    INK,
    base_axis,
    base_layout,
    with_legend,
)

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
        "layout": base_layout(
            height=300,
            margin={"l": 8, "r": 96, "t": 12, "b": 8},
            xaxis=base_axis(title="share", range=[0, 1.02], dtick=0.1, tickformat=".1f"),
            yaxis=base_axis(
                categoryorder="array", categoryarray=labels, showgrid=False, ticks="", ticklen=0
            ),
            annotations=annotations,
            **with_legend(),
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
        "layout": base_layout(
            height=360,
            xaxis=base_axis(title="REFERENCED threshold", dtick=0.1, tickformat=".2f"),
            yaxis=base_axis(range=[0, 1.05], tickformat=".1f"),
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
            **with_legend(),
        ),
    }
