"""One object's page: the confidence and salience trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from dashboard.charts.style import (
    ACCENT,
    ALERT,
    GREY,
    INK,
    OK,
    base_axis,
    base_layout,
    iso,
    with_legend,
)
from rms import policy

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
        return {"data": [], "layout": base_layout()}
    xs = [iso(p.ts) for p in points]
    hover = [
        f"#{p.seq} {p.op_type}" + (f" · {p.signal_type}" if p.signal_type else "") for p in points
    ]
    sal_x, sal_y = [], []
    for k, p in enumerate(points):
        sal_x.append(iso(p.ts))
        sal_y.append(round(p.salience_effective, 4))
        nxt = points[k + 1].ts if k + 1 < len(points) else end
        if nxt - p.ts >= DECAY_MIN_GAP:
            step = (nxt - p.ts) / DECAY_SAMPLES
            for j in range(1, DECAY_SAMPLES + 1):
                t = p.ts + step * j
                sal_x.append(iso(t))
                sal_y.append(round(policy.salience_effective(p.state, created_at, t), 4))
    conf_x = [*xs, iso(end)] if end > points[-1].ts else xs
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
                "x0": iso(as_of),
                "x1": iso(as_of),
                "y0": 0,
                "y1": 1,
                "line": {"color": INK, "width": 1, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "x": iso(as_of),
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
        "layout": base_layout(
            height=300,
            xaxis=base_axis(type="date"),
            yaxis=base_axis(range=[0, 1.02], tickformat=".1f"),
            shapes=shapes,
            annotations=annotations,
            **with_legend(),
        ),
    }


# --- why the object is at its value (the explanation's waterfall) -------------------------------

#: The chart keeps this many of the biggest moves; the rest between them are merged into one
#: "N smaller steps" bar each, so a long history stays readable (the table lists every step).
WATERFALL_MAX_BARS = 16

CONTROL_LABELS = {
    "session_cap": "session cap",
    "repeat_diminishing": "repeat",
    "correlation_discount": "correlation",
    "reliability_discount": "reliability",
    "ceiling": "ceiling",
    "floor": "floor",
}


def step_label(step: dict) -> str:
    """What moved the value, in a few words: the signal (or admin operation) or the decay."""
    if step["kind"] == "decay":
        return f"decay ({step['days_since_reinforcement']:.1f} d)"
    if step["kind"] in ("signal", "rejected"):
        return step.get("signal_type") or step["op_type"]
    return step["op_type"]


def controls_text(step: dict) -> str:
    """The controls that cut a signal, each with its cut: "session cap −0.012 · ceiling −0.030"."""
    return " · ".join(
        f"{CONTROL_LABELS.get(c['control'], c['control'])} −{c['cut']:.3f}"
        for c in step.get("controls") or ()
    )


def waterfall_bars(series: dict, max_bars: int = WATERFALL_MAX_BARS) -> list[dict]:
    """The explanation's steps that moved the value, as bars in chain order: the ``max_bars``
    biggest moves each a bar, every run of smaller moves between them one merged bar. Each bar
    is ``{"label", "before", "after", "delta", "n", "merged", "controls", "ts"}``; the bars
    chain from the series' start to its final value (each ``before`` is the previous
    ``after``)."""
    moving = [s for s in series["steps"] if s["after"] != s["before"]]
    if len(moving) > max_bars:
        keep = sorted(
            range(len(moving)), key=lambda i: abs(moving[i]["after"] - moving[i]["before"])
        )[-(max_bars - 1) :]
        keep = set(keep)
    else:
        keep = set(range(len(moving)))
    bars: list[dict] = []
    run: list[dict] = []

    def flush() -> None:
        if run:
            bars.append(
                {
                    "label": f"{len(run)} smaller step{'s' if len(run) > 1 else ''}",
                    "before": run[0]["before"],
                    "after": run[-1]["after"],
                    "delta": run[-1]["after"] - run[0]["before"],
                    "n": len(run),
                    "merged": True,
                    "controls": "",
                    "ts": run[-1]["ts"],
                }
            )
            run.clear()

    for i, step in enumerate(moving):
        if i in keep:
            flush()
            bars.append(
                {
                    "label": step_label(step),
                    "before": step["before"],
                    "after": step["after"],
                    "delta": step["after"] - step["before"],
                    "n": 1,
                    "merged": False,
                    "controls": controls_text(step),
                    "ts": step["ts"],
                }
            )
        else:
            run.append(step)
    flush()
    return bars


def waterfall(series: dict, bars: Sequence[dict], title: str, end: str = "now") -> dict:
    """A Plotly waterfall of one series: its start, each bar, and the final value (labelled
    ``end``: "now", or "as of" a past time)."""
    xs = ["start"] + [f"{k}. {b['label']}" for k, b in enumerate(bars, 1)] + [end]
    ys = [series["start"]] + [b["delta"] for b in bars] + [series["final"]]
    measure = ["absolute"] + ["relative"] * len(bars) + ["total"]
    hover = (
        [f"created at {series['start']:.3f}"]
        + [
            f"{b['label']} · {b['ts'][:16].replace('T', ' ')}<br>"
            f"{b['before']:.3f} → {b['after']:.3f} ({b['delta']:+.3f})"
            + (f"<br>cut by {b['controls']}" if b["controls"] else "")
            for b in bars
        ]
        + [f"{title} {series['final']:.3f}"]
    )
    text = (
        [f"{series['start']:.3f}"]
        + [f"{b['delta']:+.3f}" + (" ✂" if b["controls"] else "") for b in bars]
        + [f"{series['final']:.3f}"]
    )
    data = [
        {
            "type": "waterfall",
            "name": title,
            "orientation": "v",
            "x": xs,
            "y": ys,
            "measure": measure,
            "text": text,
            "textposition": "outside",
            "cliponaxis": False,
            "customdata": hover,
            "hovertemplate": "%{customdata}<extra></extra>",
            "increasing": {"marker": {"color": OK}},
            "decreasing": {"marker": {"color": ALERT}},
            "totals": {"marker": {"color": ACCENT}},
            "connector": {"line": {"color": GREY, "width": 1, "dash": "dot"}},
        }
    ]
    # The axis spans the levels the bars reach, not 0..1: a step of 0.005 on a 0.9 value must
    # be visible. The start and final bars are cut at the bottom; their values are printed.
    levels = [series["start"], series["final"]] + [b["after"] for b in bars]
    lo, hi = min(levels), max(levels)
    pad = max(0.02, 0.2 * (hi - lo))
    return {
        "data": data,
        "layout": base_layout(
            height=340,
            xaxis=base_axis(type="category", tickangle=-35, automargin=True),
            yaxis=base_axis(range=[max(0.0, lo - pad), hi + pad], tickformat=".2f"),
            showlegend=False,
        ),
    }
