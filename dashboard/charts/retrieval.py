"""Retrieval quality over days (docs/METRICS.md): hit rate, MRR and precision@1 against their
thresholds, precision at each rank, and the tokens wasted at each rank."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from dashboard.charts.style import (
    ACCENT,
    ACCENT_MID,
    DASHES,
    GREY,
    INK,
    base_axis,
    base_layout,
    with_legend,
)
from feedback import metrics

#: The retrieval metrics that alert, as the cards and the alert history name them.
ALERT_LABELS = {
    metrics.RETRIEVAL_HIT_RATE: "Retrieval hit rate",
    metrics.RETRIEVAL_PRECISION_AT_1: "Retrieval precision@1",
}

#: One colour per rank line (rank 1 strongest), dashes as a second cue.
RANK_COLOURS = (ACCENT, "#0e9384", "#dc6803", "#7a5af8", GREY)


def _x(days: Sequence[date]) -> list[str]:
    return [d.isoformat() for d in days]


def _value(day: dict | None, key: str, rank: str | None = None):
    if day is None:
        return None
    value = day[key] if rank is None else day[key].get(rank)
    return None if value is None else round(value, 4)


def _date_axis(n: int) -> dict:
    return base_axis(type="date", tickformat="%b %-d", nticks=min(max(n, 2), 8), showgrid=False)


def rates(days: Sequence[date], by_day: dict, alerts: dict) -> dict:
    """Hit rate, MRR and precision@1 per day; the alerting two with their thresholds dashed."""
    lines = (
        ("hit rate", "hit_rate", None, ACCENT, "solid"),
        ("MRR", "mrr", None, INK, "dot"),
        ("precision@1", "precision_at_rank", "1", "#0e9384", "dash"),
    )
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": label,
            "x": _x(days),
            "y": [_value(by_day[d], key, rank) for d in days],
            "line": {"color": colour, "width": 2, "dash": dash},
            "marker": {"size": 5},
            "connectgaps": False,
            "hovertemplate": f"{label}<br>%{{x|%b %-d}}<br>%{{y:.3f}}<extra></extra>",
        }
        for label, key, rank, colour, dash in lines
    ]
    shapes, annotations = [], []
    for name, label in (
        (metrics.RETRIEVAL_HIT_RATE, "hit rate threshold"),
        (metrics.RETRIEVAL_PRECISION_AT_1, "precision@1 threshold"),
    ):
        threshold = alerts[name]["threshold"]
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": threshold,
                "y1": threshold,
                "line": {"color": GREY, "width": 1, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "xref": "paper",
                "x": 1,
                "y": threshold,
                "text": f"{label} {threshold:.2f}",
                "showarrow": False,
                "xanchor": "right",
                "yanchor": "bottom",
                "font": {"size": 11, "color": GREY},
            }
        )
    return {
        "data": data,
        "layout": base_layout(
            height=300,
            xaxis=_date_axis(len(days)),
            yaxis=base_axis(range=[0, 1.05], tickformat=".1f"),
            shapes=shapes,
            annotations=annotations,
            **with_legend(),
        ),
    }


def precision_by_rank(days: Sequence[date], by_day: dict, ranks: Sequence[int]) -> dict:
    """Precision at each rank per day, one line per rank: where retrieval fails."""
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": f"rank {r}",
            "x": _x(days),
            "y": [_value(by_day[d], "precision_at_rank", str(r)) for d in days],
            "line": {
                "color": RANK_COLOURS[k % len(RANK_COLOURS)],
                "width": 2,
                "dash": DASHES[k % len(DASHES)],
            },
            "marker": {"size": 4},
            "connectgaps": False,
            "hovertemplate": f"rank {r}<br>%{{x|%b %-d}}<br>precision %{{y:.3f}}<extra></extra>",
        }
        for k, r in enumerate(ranks)
    ]
    return {
        "data": data,
        "layout": base_layout(
            height=300,
            xaxis=_date_axis(len(days)),
            yaxis=base_axis(range=[0, 1.05], tickformat=".1f"),
            **with_legend(),
        ),
    }


def wasted_by_rank(days: Sequence[date], by_day: dict, ranks: Sequence[int]) -> dict:
    """Tokens spent on unused injections per day, stacked by rank."""
    data = [
        {
            "type": "bar",
            "name": f"rank {r}",
            "x": _x(days),
            "y": [(by_day[d] or {}).get("wasted_tokens_by_rank", {}).get(str(r), 0) for d in days],
            "marker": {"color": RANK_COLOURS[k % len(RANK_COLOURS)]},
            "hovertemplate": f"rank {r}<br>%{{x|%b %-d}}<br>%{{y:,}} tokens<extra></extra>",
        }
        for k, r in enumerate(ranks)
    ]
    return {
        "data": data,
        "layout": base_layout(
            height=300,
            barmode="stack",
            xaxis=_date_axis(len(days)),
            yaxis=base_axis(rangemode="tozero", tickformat=",d"),
            **with_legend(),
        ),
    }


def window_by_rank(window: dict, ranks: Sequence[int]) -> dict:
    """The window's precision at each rank as bars: the rank at which retrieval fails."""
    ys = [round(window["precision_at_rank"].get(str(r), 0.0), 4) for r in ranks]
    return {
        "data": [
            {
                "type": "bar",
                "x": [f"rank {r}" for r in ranks],
                "y": ys,
                "marker": {"color": ACCENT_MID},
                "text": [f"{y:.3f}" for y in ys],
                "textposition": "outside",
                "cliponaxis": False,
                "hovertemplate": "%{x}<br>precision %{y:.3f}<extra></extra>",
            }
        ],
        "layout": base_layout(
            height=260,
            xaxis=base_axis(type="category"),
            yaxis=base_axis(range=[0, 1.12], tickformat=".1f"),
        ),
    }
