"""SPEC §13: Beta-Binomial edge confidence, decay, path product, expansion and calibration."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rms import evidence as ev
from rms.evidence import (
    AUTHORITATIVE,
    CONTRADICT,
    CORROBORATE,
    EXPLICIT,
    EXTERNAL,
    INFERRED,
    SELF,
    SPECULATIVE,
    USER,
    EdgeRecord,
    EvidenceError,
    ExpansionEdge,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
EXACT = {"abs": 1e-12}


# --- priors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "alpha", "beta"),
    [
        (AUTHORITATIVE, 10.0, 0.0),
        (EXPLICIT, 9.0, 1.0),
        (INFERRED, 6.0, 4.0),
        (SPECULATIVE, 3.0, 7.0),
    ],
)
def test_prior_is_concentration_ten_split_by_context_mean(context, alpha, beta):
    a, b = ev.prior(context)
    assert a == pytest.approx(alpha, **EXACT)
    assert b == pytest.approx(beta, **EXACT)
    assert a + b == ev.CONCENTRATION
    assert ev.mean(a, b) == pytest.approx(ev.PRIOR_MEANS[context], **EXACT)


def test_unknown_extraction_context_is_a_400_value_error():
    with pytest.raises(EvidenceError) as info:
        ev.prior("GUESSED")
    assert isinstance(info.value, ValueError)
    assert info.value.field == "extraction_context"
    assert info.value.status == 400


# --- evidence -------------------------------------------------------------------------------------


def test_worked_example_inferred_three_corroborations_then_a_contradiction():
    alpha, beta = ev.prior(INFERRED)
    means = [ev.mean(alpha, beta)]
    for kind in (CORROBORATE, CORROBORATE, CORROBORATE, CONTRADICT):
        alpha, beta = ev.apply_evidence(alpha, beta, kind, EXTERNAL)
        means.append(ev.mean(alpha, beta))
    assert means == [
        pytest.approx(6 / 10, **EXACT),
        pytest.approx(7 / 11, **EXACT),
        pytest.approx(8 / 12, **EXACT),
        pytest.approx(9 / 13, **EXACT),
        pytest.approx(9 / 14, **EXACT),
    ]
    assert [round(m, 3) for m in means] == [0.600, 0.636, 0.667, 0.692, 0.643]


@pytest.mark.parametrize(
    ("provenance", "weight"), [(EXTERNAL, 1.0), (USER, 0.8), (SELF, 0.05), (None, 0.05)]
)
def test_evidence_weight_depends_on_provenance_and_missing_counts_as_self(provenance, weight):
    assert ev.apply_evidence(6.0, 4.0, CORROBORATE, provenance) == pytest.approx(
        (6.0 + weight, 4.0)
    )
    assert ev.apply_evidence(6.0, 4.0, CONTRADICT, provenance) == pytest.approx((6.0, 4.0 + weight))


def test_user_corroboration_moves_the_mean_by_its_weight():
    alpha, beta = ev.apply_evidence(*ev.prior(INFERRED), CORROBORATE, USER)
    assert ev.mean(alpha, beta) == pytest.approx(6.8 / 10.8, **EXACT)


@pytest.mark.parametrize("provenance", ["agent", "EXTERNAL", ""])
def test_unknown_provenance_word_is_refused(provenance):
    with pytest.raises(EvidenceError) as info:
        ev.apply_evidence(6.0, 4.0, CORROBORATE, provenance)
    assert info.value.field == "provenance"


@pytest.mark.parametrize("kind", ["support", "CORROBORATE", ""])
def test_unknown_evidence_kind_is_refused(kind):
    with pytest.raises(EvidenceError) as info:
        ev.apply_evidence(6.0, 4.0, kind, EXTERNAL)
    assert info.value.field == "kind"


def test_mean_without_mass_is_one_half():
    assert ev.mean(0.0, 0.0) == 0.5


def test_variance_matches_the_beta_formula():
    assert ev.variance(*ev.prior(INFERRED)) == pytest.approx(6 * 4 / (10**2 * 11), **EXACT)
    assert ev.variance(9.0, 5.0) == pytest.approx(9 * 5 / (14**2 * 15), **EXACT)


@pytest.mark.parametrize("provenance", [EXTERNAL, USER, SELF])
def test_variance_shrinks_as_corroboration_accumulates(provenance):
    alpha, beta = ev.prior(INFERRED)
    variances = [ev.variance(alpha, beta)]
    for _ in range(20):
        alpha, beta = ev.apply_evidence(alpha, beta, CORROBORATE, provenance)
        variances.append(ev.variance(alpha, beta))
    assert all(later < earlier for earlier, later in zip(variances, variances[1:], strict=False))


def test_variance_shrinks_as_balanced_evidence_accumulates():
    # One corroboration and one contradiction per round: the mean barely moves, the certainty grows.
    alpha, beta = ev.prior(SPECULATIVE)
    variances = [ev.variance(alpha, beta)]
    for _ in range(10):
        alpha, beta = ev.apply_evidence(alpha, beta, CORROBORATE, EXTERNAL)
        alpha, beta = ev.apply_evidence(alpha, beta, CONTRADICT, EXTERNAL)
        variances.append(ev.variance(alpha, beta))
    assert all(later < earlier for earlier, later in zip(variances, variances[1:], strict=False))


def test_variance_without_mass_is_maximal_uncertainty_not_certainty():
    assert ev.variance(0.0, 0.0) == 0.25


# --- decay ----------------------------------------------------------------------------------------


def _effective_after(days: float, context: str = INFERRED) -> float:
    alpha, beta = ev.prior(context)
    return ev.effective_confidence(alpha, beta, None, T0, T0 + timedelta(days=days))


def test_no_decay_at_zero_days():
    assert _effective_after(0) == pytest.approx(0.6, **EXACT)


def test_effective_confidence_halves_every_ninety_days():
    assert _effective_after(90) == pytest.approx(0.3, **EXACT)
    assert _effective_after(180) == pytest.approx(0.15, **EXACT)


def test_decay_uses_fractional_days():
    assert _effective_after(45) == pytest.approx(0.6 * 2**-0.5, **EXACT)
    assert _effective_after(0.5) < 0.6


def test_decay_never_goes_below_the_floor():
    assert _effective_after(730, SPECULATIVE) == ev.DECAY_FLOOR


def test_the_floor_applies_to_a_low_mean_once_time_has_passed_but_not_at_zero_days():
    assert ev.effective_confidence(0.0, 10.0, None, T0, T0) == 0.0
    assert ev.effective_confidence(0.0, 10.0, None, T0, T0 + timedelta(seconds=1)) == 0.05


def test_decay_counts_from_last_corroboration_when_there_is_one():
    now = T0 + timedelta(days=200)
    effective = ev.effective_confidence(6.0, 4.0, T0 + timedelta(days=110), T0, now)
    assert effective == pytest.approx(0.3, **EXACT)


def test_as_of_before_the_clock_applies_no_decay():
    assert ev.effective_confidence(6.0, 4.0, None, T0, T0 - timedelta(days=3)) == 0.6


@pytest.mark.parametrize(
    ("kind", "provenance", "resets"),
    [
        (CORROBORATE, EXTERNAL, True),
        (CORROBORATE, USER, True),
        (CORROBORATE, SELF, False),
        (CORROBORATE, None, False),
        (CONTRADICT, EXTERNAL, False),
        (CONTRADICT, USER, False),
        (CONTRADICT, SELF, False),
    ],
)
def test_only_independent_corroboration_resets_the_clock(kind, provenance, resets):
    assert ev.resets_clock(kind, provenance) is resets


# --- folding the evidence log ---------------------------------------------------------------------


def test_fold_edge_replays_the_worked_example_and_tracks_the_clock():
    events = [
        (CORROBORATE, EXTERNAL, T0 + timedelta(days=1)),
        (CORROBORATE, EXTERNAL, T0 + timedelta(days=2)),
        (CORROBORATE, EXTERNAL, T0 + timedelta(days=3)),
        (CONTRADICT, EXTERNAL, T0 + timedelta(days=4)),
    ]
    alpha, beta, last = ev.fold_edge(INFERRED, events)
    assert (alpha, beta) == pytest.approx((9.0, 5.0), **EXACT)
    assert ev.mean(alpha, beta) == pytest.approx(9 / 14, **EXACT)
    assert last == T0 + timedelta(days=3)


def test_fold_edge_without_evidence_is_the_prior_with_no_clock():
    state = ev.fold_edge(SPECULATIVE, [])
    assert state == ev.EdgePosterior(3.0, 7.0, None)


def test_self_corroboration_adds_a_little_but_never_refreshes_the_edge():
    events = [(CORROBORATE, SELF, T0 + timedelta(days=d)) for d in range(1, 21)]
    state = ev.fold_edge(INFERRED, events)
    assert state.alpha == pytest.approx(6.0 + 20 * 0.05, abs=1e-9)
    assert state.last_corroborated_at is None


def test_the_clock_never_moves_backwards_on_a_late_recorded_corroboration():
    events = [
        (CORROBORATE, USER, T0 + timedelta(days=10)),
        (CORROBORATE, EXTERNAL, T0 + timedelta(days=5)),
    ]
    assert ev.fold_edge(EXPLICIT, events).last_corroborated_at == T0 + timedelta(days=10)


def test_fold_edge_equals_stepping_one_event_at_a_time():
    events = [
        (CORROBORATE, USER, T0 + timedelta(days=1)),
        (CONTRADICT, None, T0 + timedelta(days=2)),
        (CORROBORATE, SELF, T0 + timedelta(days=3)),
    ]
    state = ev.initial_edge(INFERRED)
    for kind, provenance, ts in events:
        state = ev.step_edge(state, kind, provenance, ts)
    assert ev.fold_edge(INFERRED, events) == state


def test_fold_edge_refuses_unknown_values():
    with pytest.raises(EvidenceError):
        ev.fold_edge("GUESSED", [])
    with pytest.raises(EvidenceError):
        ev.fold_edge(INFERRED, [(CORROBORATE, "rumour", T0)])


# --- path confidence ------------------------------------------------------------------------------


def test_path_confidence_is_the_product_of_edges():
    assert ev.path_confidence([0.8, 0.7, 0.9]) == pytest.approx(0.504, **EXACT)
    assert ev.path_confidence([0.9, 0.9]) > ev.path_confidence([0.7] * 4)


def test_empty_path_has_confidence_one():
    assert ev.path_confidence([]) == 1.0


# --- graph expansion ------------------------------------------------------------------------------


def _edge(edge_id: str, source: str, target: str, effective: float) -> ExpansionEdge:
    return ExpansionEdge(id=edge_id, source=source, target=target, effective=effective)


def _scores(results) -> dict[str, float]:
    return {r.object_id: r.score for r in results}


def test_expansion_follows_edges_in_both_directions():
    results = ev.expand_graph(
        {"s": 1.0},
        [_edge("e1", "s", "out", 0.9), _edge("e2", "in", "s", 0.6)],
    )
    assert [(r.object_id, r.path, r.seed_id) for r in results] == [
        ("out", ("e1",), "s"),
        ("in", ("e2",), "s"),
    ]
    assert _scores(results) == pytest.approx({"out": 0.9, "in": 0.6})


def test_neighbour_score_is_seed_score_times_effective_confidence():
    results = ev.expand_graph(
        {"e1": 0.84}, [_edge("a", "e1", "n1", 0.9), _edge("b", "e1", "n2", 0.6)]
    )
    assert _scores(results) == pytest.approx({"n1": 0.756, "n2": 0.504}, **EXACT)


def test_edges_below_the_effective_threshold_are_not_followed():
    results = ev.expand_graph(
        {"s": 1.0}, [_edge("weak", "s", "a", 0.099), _edge("edge", "s", "b", 0.1)]
    )
    assert _scores(results) == pytest.approx({"b": 0.1})


def test_neighbours_below_the_score_threshold_are_dropped():
    # The edge itself is strong enough to follow, but the seed is weak.
    results = ev.expand_graph(
        {"weak": 0.2, "strong": 1.0},
        [_edge("e1", "weak", "a", 0.45), _edge("e2", "strong", "b", 0.45)],
    )
    assert _scores(results) == pytest.approx({"b": 0.45})


def test_the_best_path_per_neighbour_is_kept():
    results = ev.expand_graph(
        {"s1": 0.9, "s2": 0.5},
        [
            _edge("e1", "s1", "n", 0.5),  # 0.45
            _edge("e2", "n", "s2", 1.0),  # 0.5, best
            _edge("e3", "s1", "n", 0.3),  # 0.27
        ],
    )
    assert len(results) == 1
    assert results[0].object_id == "n"
    assert results[0].score == pytest.approx(0.5)
    assert results[0].path == ("e2",)
    assert results[0].seed_id == "s2"


def test_equal_scores_keep_the_smaller_edge_id_whatever_the_edge_order():
    edges = [_edge("e9", "s", "n", 0.5), _edge("e3", "s", "n", 0.5)]
    assert ev.expand_graph({"s": 1.0}, edges)[0].path == ("e3",)
    assert ev.expand_graph({"s": 1.0}, list(reversed(edges)))[0].path == ("e3",)


def test_seeds_are_not_returned_as_neighbours():
    results = ev.expand_graph(
        {"a": 1.0, "b": 0.8}, [_edge("ab", "a", "b", 0.9), _edge("bc", "b", "c", 0.9)]
    )
    assert [r.object_id for r in results] == ["c"]


def test_deprecated_objects_are_neither_offered_nor_walked_through():
    results = ev.expand_graph(
        {"s": 1.0, "dead_seed": 1.0},
        [
            _edge("e1", "s", "dead", 0.9),
            _edge("e2", "dead_seed", "x", 0.9),
            _edge("e3", "s", "alive", 0.5),
        ],
        excluded={"dead", "dead_seed"},
    )
    assert [r.object_id for r in results] == ["alive"]


def test_results_are_sorted_by_score_then_object_id():
    results = ev.expand_graph(
        {"s": 1.0},
        [
            _edge("e1", "s", "c", 0.5),
            _edge("e2", "s", "a", 0.5),
            _edge("e3", "s", "b", 0.8),
        ],
    )
    assert [r.object_id for r in results] == ["b", "a", "c"]


def test_expansion_of_nothing_is_empty():
    assert ev.expand_graph({}, [_edge("e1", "a", "b", 1.0)]) == []
    assert ev.expand_graph({"a": 1.0}, []) == []


# --- calibration ----------------------------------------------------------------------------------


def test_calibration_counts_only_independent_evidence_per_context():
    records = [
        EdgeRecord(SPECULATIVE, [(CORROBORATE, EXTERNAL), (CONTRADICT, USER), (CORROBORATE, SELF)]),
        EdgeRecord(SPECULATIVE, [(CONTRADICT, EXTERNAL), (CORROBORATE, None)]),
        EdgeRecord(SPECULATIVE, []),
        EdgeRecord(EXPLICIT, [(CORROBORATE, USER), (CORROBORATE, EXTERNAL)]),
        EdgeRecord(INFERRED, [(CORROBORATE, SELF)]),
    ]
    rows = {row.extraction_context: row for row in ev.calibration(records)}
    assert list(rows) == [AUTHORITATIVE, EXPLICIT, INFERRED, SPECULATIVE]

    speculative = rows[SPECULATIVE]
    assert speculative.prior_mean == pytest.approx(0.3, **EXACT)
    assert (speculative.edges, speculative.observations, speculative.corroborations) == (3, 3, 1)
    assert speculative.observed == pytest.approx(1 / 3, **EXACT)
    assert speculative.difference == pytest.approx(1 / 3 - 0.3, **EXACT)

    explicit = rows[EXPLICIT]
    assert (explicit.edges, explicit.observations, explicit.corroborations) == (1, 2, 2)
    assert explicit.observed == 1.0
    assert explicit.difference == pytest.approx(0.1, **EXACT)


def test_calibration_without_independent_evidence_has_no_observed_share():
    rows = {r.extraction_context: r for r in ev.calibration([EdgeRecord(INFERRED, [])])}
    inferred = rows[INFERRED]
    assert (inferred.edges, inferred.observations, inferred.corroborations) == (1, 0, 0)
    assert inferred.observed is None
    assert inferred.difference is None
    assert rows[AUTHORITATIVE].edges == 0
    assert rows[AUTHORITATIVE].observed is None


def test_calibration_refuses_unknown_values():
    with pytest.raises(EvidenceError):
        ev.calibration([EdgeRecord("GUESSED", [])])
    with pytest.raises(EvidenceError):
        ev.calibration([EdgeRecord(INFERRED, [(CORROBORATE, "rumour")])])
    with pytest.raises(EvidenceError):
        ev.calibration([EdgeRecord(INFERRED, [("maybe", EXTERNAL)])])


# --- purity ---------------------------------------------------------------------------------------


def test_module_imports_without_django():
    # Loaded by file path in a fresh interpreter: importing it as ``rms.evidence`` would first run
    # ``rms/__init__.py``, whose Celery app pulls in django.conf, and hide what the module imports.
    module_path = Path(ev.__file__).resolve()
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("evidence_alone", {str(module_path)!r})
        module = importlib.util.module_from_spec(spec)
        sys.modules["evidence_alone"] = module
        spec.loader.exec_module(module)
        assert module.mean(9.0, 5.0) == 9 / 14
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "rms"))
        assert not bad, bad
        """
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_module_imports_only_the_standard_library():
    tree = ast.parse(Path(ev.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported
    assert imported <= sys.stdlib_module_names | {"__future__"}


# --- properties -----------------------------------------------------------------------------------

contexts = st.sampled_from(ev.EXTRACTION_CONTEXTS)
kinds = st.sampled_from(ev.EVIDENCE_KINDS)
provenances = st.sampled_from([EXTERNAL, USER, SELF, None])
events = st.lists(st.tuples(kinds, provenances), max_size=200)
masses = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


def _state(context, history):
    alpha, beta = ev.prior(context)
    for kind, provenance in history:
        alpha, beta = ev.apply_evidence(alpha, beta, kind, provenance)
    return alpha, beta


@given(masses, masses)
def test_mean_stays_in_the_unit_interval(alpha, beta):
    assert 0.0 <= ev.mean(alpha, beta) <= 1.0


@given(contexts, events)
def test_mean_of_any_reachable_posterior_stays_in_the_unit_interval(context, history):
    assert 0.0 <= ev.mean(*_state(context, history)) <= 1.0


@given(contexts, events, provenances)
def test_corroboration_never_lowers_the_mean(context, history, provenance):
    alpha, beta = _state(context, history)
    after = ev.apply_evidence(alpha, beta, CORROBORATE, provenance)
    assert ev.mean(*after) >= ev.mean(alpha, beta)


@given(contexts, events, provenances)
def test_contradiction_never_raises_the_mean(context, history, provenance):
    alpha, beta = _state(context, history)
    after = ev.apply_evidence(alpha, beta, CONTRADICT, provenance)
    assert ev.mean(*after) <= ev.mean(alpha, beta)


@given(contexts, events)
def test_variance_is_bounded_by_the_mass_of_evidence(context, history):
    # Not monotone per step (a contradiction can pull a near-certain edge towards 0.5), but the
    # variance of Beta(α, β) is at most 1/(4(α+β+1)), a bound that only shrinks with evidence.
    alpha, beta = _state(context, history)
    assert ev.variance(alpha, beta) <= 1.0 / (4.0 * (alpha + beta + 1.0)) + 1e-15


@given(
    contexts,
    events,
    st.floats(min_value=1e-6, max_value=36500.0, allow_nan=False),
)
def test_effective_confidence_stays_between_floor_and_one_once_time_has_passed(
    context, history, days
):
    alpha, beta = _state(context, history)
    effective = ev.effective_confidence(alpha, beta, None, T0, T0 + timedelta(days=days))
    assert ev.DECAY_FLOOR <= effective <= 1.0
