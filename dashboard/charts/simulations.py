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


def _line(x: list, y: list, line: dict, hover: str, name: str | None = None, **extra) -> dict:
    """One line trace: named in the legend, or left out of it (``name`` None); ``extra`` places
    it (``xaxis``/``yaxis``) or fills under it, after its line."""
    trace = {"type": "scatter", "mode": "lines", "x": x, "y": y}
    if "xaxis" in extra:
        trace["xaxis"] = extra.pop("xaxis")
        trace["yaxis"] = extra.pop("yaxis")
    trace["line"] = line
    trace.update(extra)
    if name is None:
        trace["showlegend"] = False
    else:
        trace["name"] = name
    trace["hovertemplate"] = hover
    return trace


def _two_panels(data: list, top: dict, top_from: float, bottom: dict, bottom_to: float, **kw):
    """The simulations' figure shape: a tall upper panel over a short lower one, one shared
    session axis labelled under the lower; ``top``/``bottom`` are the panels' y axes."""
    return {
        "data": data,
        "layout": base_layout(
            height=380,
            xaxis=base_axis(domain=[0, 1], anchor="y", showticklabels=False),
            yaxis=base_axis(domain=[top_from, 1], **top),
            xaxis2=base_axis(domain=[0, 1], anchor="y2", matches="x", title="session"),
            yaxis2=base_axis(domain=[0, bottom_to], **bottom),
            **kw,
            **with_legend(),
        ),
    }


def stability(series: Sequence[dict], max_extreme_share: float = 0.5) -> dict:
    """Confidence distribution per session (p10–p90 band, median, min and max) above the share
    of objects at an extreme, with the criterion's limit dashed."""
    x = [p["session"] for p in series]

    def hover(label: str) -> str:
        return f"session %{{x}}<br>{label} %{{y:.3f}}<extra></extra>"

    grey = {"color": GREY_SOFT, "width": 1}
    mid = {"color": ACCENT_MID, "width": 0.5}
    data = [
        _line(x, [p["max"] for p in series], grey, hover("max"), "min / max"),
        _line(x, [p["min"] for p in series], dict(grey), hover("min")),
        _line(x, [p["p10"] for p in series], mid, hover("p10")),
        _line(
            x,
            [p["p90"] for p in series],
            dict(mid),
            hover("p90"),
            "p10–p90",
            fill="tonexty",
            fillcolor=ACCENT_SOFT,
        ),
        _line(
            x, [p["p50"] for p in series], {"color": ACCENT, "width": 2}, hover("median"), "median"
        ),
        _line(
            x,
            [p["extreme_share"] for p in series],
            {"color": INK, "width": 1.5, "shape": "hv"},
            "session %{x}<br>%{y:.1%} at an extreme<extra></extra>",
            "share at an extreme",
            xaxis="x2",
            yaxis="y2",
        ),
    ]
    limit = {
        "type": "line",
        "xref": "x2 domain",
        "yref": "y2",
        "x0": 0,
        "x1": 1,
        "y0": max_extreme_share,
        "y1": max_extreme_share,
        "line": {"color": GREY, "width": 1, "dash": "dash"},
    }
    return _two_panels(
        data,
        {"title": "confidence", "range": [0, 1.02], "tickformat": ".1f"},
        0.36,
        {"title": "at extreme", "range": [0, 1], "tickformat": ".0%"},
        0.26,
        shapes=[limit],
    )


def precision(runs: Sequence[tuple[str, Sequence[dict]]]) -> dict:
    """precision@5 per session for one or more runs (told apart by dash, one hue), above the mean
    confidence of the known-relevant and the known-wrong objects of the first run."""
    data = []
    for k, (label, series) in enumerate(runs):
        line = {
            "color": ACCENT if k == 0 else INK,
            "width": 2 if k == 0 else 1.5,
            "dash": DASHES[k % len(DASHES)],
            "shape": "hv",
        }
        data.append(
            _line(
                [p["session"] for p in series],
                [p["precision_at_5"] for p in series],
                line,
                f"{label}<br>session %{{x}}<br>p@5 %{{y:.2f}}<extra></extra>",
                f"p@5 · {label}",
            )
        )
    if runs:
        label, series = runs[0]
        x = [p["session"] for p in series]
        for key, name, color in (
            ("mean_confidence_relevant", "relevant", ACCENT),
            ("mean_confidence_wrong", "known-wrong", GREY),
        ):
            data.append(
                _line(
                    x,
                    [p.get(key) for p in series],
                    {"color": color, "width": 1.5},
                    f"{name}<br>session %{{x}}<br>%{{y:.3f}}<extra></extra>",
                    f"mean confidence, {name}",
                    xaxis="x2",
                    yaxis="y2",
                )
            )
    return _two_panels(
        data,
        {"title": "precision@5", "range": [0, 1.05], "tickformat": ".1f"},
        0.45,
        {"title": "confidence", "range": [0, 1.02], "tickformat": ".1f"},
        0.36,
    )
