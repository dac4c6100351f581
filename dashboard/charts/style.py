"""The look every chart shares: one accent hue for data, grey for references (thresholds,
priors, secondary series), the state colours (ok / alert) only where a point *is* a state, and
the axis, layout and legend every figure starts from.
"""

from __future__ import annotations

from datetime import datetime

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


def base_axis(**kw) -> dict:
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


def base_layout(height: int = 280, **kw) -> dict:
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


def with_legend() -> dict:
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


def iso(ts: datetime) -> str:
    return ts.isoformat()
