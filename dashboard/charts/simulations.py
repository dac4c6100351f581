"""The simulations page's figures (SPEC §14): stability and precision@5 runs."""

from __future__ import annotations

from collections.abc import Sequence

from dashboard.charts.style import (
    ACCENT,
    ACCENT_MID,
    ACCENT_SOFT,
    DASHES,
    GREY,
    GREY_SOFT,
    INK,
    base_axis,
    base_layout,
    with_legend,
)

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
        "layout": base_layout(
            height=380,
            xaxis=base_axis(domain=[0, 1], anchor="y", showticklabels=False),
            yaxis=base_axis(
                domain=[0.36, 1], title="confidence", range=[0, 1.02], tickformat=".1f"
            ),
            xaxis2=base_axis(domain=[0, 1], anchor="y2", matches="x", title="session"),
            yaxis2=base_axis(domain=[0, 0.26], title="at extreme", range=[0, 1], tickformat=".0%"),
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
            **with_legend(),
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
        "layout": base_layout(
            height=380,
            xaxis=base_axis(domain=[0, 1], anchor="y", showticklabels=False),
            yaxis=base_axis(
                domain=[0.45, 1], title="precision@5", range=[0, 1.05], tickformat=".1f"
            ),
            xaxis2=base_axis(domain=[0, 1], anchor="y2", matches="x", title="session"),
            yaxis2=base_axis(
                domain=[0, 0.36], title="confidence", range=[0, 1.02], tickformat=".1f"
            ),
            **with_legend(),
        ),
    }
