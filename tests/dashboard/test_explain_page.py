"""The object page's "why is it at this value": the waterfall and the steps table come from the
explanation the API answers, chain from the start to the final value, and that value is the
object's state; long histories are merged into "N smaller steps" bars and paginated."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dashboard.charts import objects as charts
from rms import policy
from rms.models import MemoryObject
from tests.dashboard.conftest import T0, login, record, session_body
from tests.factories import make_client, make_object


def _busy_object(n_sessions: int = 30):
    """One object signalled in ``n_sessions`` sessions: mostly confirmed, every fifth corrected,
    some with a second signal (the session cap and repeat diminishing cut those)."""
    writer = make_client("writer", "client", ["support"])[0]
    obj = make_object(writer, content="Alice prefers Python", ts=T0 - timedelta(days=1))
    other = make_object(writer, content="Alice uses vim", ts=T0 - timedelta(days=1))
    bodies = []
    for n in range(n_sessions):
        if n % 5 == 4:
            signals = [(obj.pk, "CORRECTED", "explicit_user")]
        else:
            signals = [(obj.pk, "CONFIRMED", "explicit_user")]
            if n % 3 == 0:
                signals.append((obj.pk, "REFERENCED", "response_analysis"))
        bodies.append(
            session_body(f"w-{n}", [(obj.pk, 40), (other.pk, 30)], signals, hours=1 + 5 * n)
        )
    record(writer, *bodies)
    return MemoryObject.objects.get(pk=obj.pk)


def _chains(series: dict, bars: list[dict]) -> None:
    assert bars, "some step moved the value"
    assert bars[0]["before"] == series["start"]
    for prev, bar in zip(bars, bars[1:], strict=False):
        assert bar["before"] == prev["after"]
    assert bars[-1]["after"] == series["final"]
    assert series["start"] + sum(b["delta"] for b in bars) == pytest.approx(
        series["final"], abs=1e-12
    )


def test_the_waterfall_chains_from_start_to_the_objects_confidence(namespaces, operator):
    obj = _busy_object()
    response = login(operator).get(f"/objects/{obj.pk}/")
    assert response.status_code == 200
    view = response.context["explanation"]
    series = view["series"]
    assert view["name"] == "confidence"
    assert series["final"] == pytest.approx(obj.confidence, abs=1e-12)
    bars = view["bars"]
    _chains(series, bars)
    # 30 sessions move confidence more often than the chart has bars: the smaller moves merge.
    moving = [s for s in series["steps"] if s["after"] != s["before"]]
    assert len(moving) > charts.WATERFALL_MAX_BARS
    assert len(bars) <= 2 * charts.WATERFALL_MAX_BARS
    assert sum(b["n"] for b in bars) == len(moving)
    merged = [b for b in bars if b["merged"]]
    assert merged and any(b["label"] == f"{b['n']} smaller steps" for b in merged)
    # The kept bars are the biggest moves.
    kept = sorted(abs(b["delta"]) for b in bars if not b["merged"])
    assert len(kept) == charts.WATERFALL_MAX_BARS - 1
    smaller = [abs(s["after"] - s["before"]) for s in moving]
    assert kept[0] >= sorted(smaller)[-len(kept)]
    # The chart draws start, each bar and the final value.
    trace = view["chart"]["data"][0]
    assert trace["type"] == "waterfall"
    assert trace["measure"] == ["absolute"] + ["relative"] * len(bars) + ["total"]
    assert trace["y"][0] == series["start"] and trace["y"][-1] == series["final"]
    # A control cut some signal, and the chart and table name it.
    cut = [s for s in series["steps"] if s.get("controls")]
    assert cut
    assert charts.controls_text(cut[0]).split(" −")[0] in charts.CONTROL_LABELS.values()
    # The table: every step, paginated, the biggest movers flagged.
    page = view["page"]
    assert page.paginator.count == len(series["steps"])
    assert page.paginator.num_pages > 1
    movers = [r for r in page.paginator.object_list if r["mover"]]
    assert len(movers) == 3
    biggest = max(abs(s["after"] - s["before"]) for s in series["steps"])
    assert max(abs(r["delta"]) for r in movers) == biggest
    html = response.content.decode()
    assert "Why it is at this value" in html and "smaller steps" in html
    assert 'class="mover"' in html
    second = login(operator).get(f"/objects/{obj.pk}/?wpage=2")
    assert second.context["explanation"]["page"].number == 2
    biggest = login(operator).get(f"/objects/{obj.pk}/?wsort=change").context["explanation"]
    first = biggest["page"].object_list
    sizes = [abs(r["delta"]) for r in first]
    assert sizes == sorted(sizes, reverse=True) and first[0]["mover"]


def test_the_salience_waterfall_respects_as_of_and_ends_at_the_decayed_value(namespaces, operator):
    obj = _busy_object(8)
    at = T0 + timedelta(days=20)
    url = f"/objects/{obj.pk}/?as_of={at:%Y-%m-%dT%H:%M:%S}&explain=salience_effective"
    view = login(operator).get(url).context["explanation"]
    series = view["series"]
    assert view["name"] == "salience_effective"
    expected = policy.salience_effective(obj.to_state(), obj.created_at, at)
    assert series["final"] == pytest.approx(expected, abs=1e-12)
    _chains(series, view["bars"])
    assert series["steps"][-1]["kind"] == "decay"
    assert view["chart"]["data"][0]["x"][-1] == "as of"
    assert view["answer"]["as_of"].startswith(f"{at:%Y-%m-%dT%H:%M:%S}")
    # Before the object existed there is nothing to explain.
    early = T0 - timedelta(days=3)
    page = login(operator).get(f"/objects/{obj.pk}/?as_of={early:%Y-%m-%dT%H:%M:%S}")
    assert page.context["explanation"] is None
    assert "did not exist at that time" in page.content.decode()


def test_an_object_nothing_moved_explains_itself(namespaces, operator):
    writer = make_client("writer", "client", ["support"])[0]
    obj = make_object(writer, content="Quiet fact", ts=T0)
    view = login(operator).get(f"/objects/{obj.pk}/").context["explanation"]
    assert view["bars"] == [] and view["series"]["final"] == obj.confidence
