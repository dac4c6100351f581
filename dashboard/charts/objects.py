"""One object's page: the confidence and salience trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from dashboard.charts.style import ACCENT, GREY, INK, base_axis, base_layout, iso, with_legend
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
