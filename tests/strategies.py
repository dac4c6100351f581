"""Hypothesis strategies shared by the retrieval-profile tests and the mirror's twin test: an
object's ranking inputs, a namespace's profile, clocks."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from feedback import retrieval

times = st.datetimes(
    # hypothesis takes naive bounds and attaches ``timezones`` to what it draws.
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001
    max_value=datetime(2030, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
inputs_st = st.builds(
    dict,
    epistemic_type=st.sampled_from(
        [
            "OBSERVED",
            "ASSERTED",
            "INFERRED",
            "HYPOTHETICAL",
            "CONDITIONAL",
            "UNVERIFIED",
            "DEPRECATED",
        ]  # fmt: skip
    ),
    condition_state=st.sampled_from([None, "UNKNOWN", "TRUE", "FALSE", "EXPIRED"]),
    confidence=unit,
    salience_base=unit,
    reinforcement_boost=st.floats(min_value=0.0, max_value=0.5),
    decay_profile=st.sampled_from(["PERMANENT", "SLOW", "MEDIUM", "FAST", "RAPID"]),
    pinned=st.booleans(),
    last_reinforced_at=st.none() | times,
    created_at=times,
    utility=unit,
    uses=st.integers(min_value=0, max_value=10_000),
    last_use_at=st.none() | times,
)
profile_st = st.builds(
    dict,
    weights=st.dictionaries(st.sampled_from(retrieval.WEIGHT_NAMES), unit),
    rules=st.fixed_dictionaries(
        {},
        optional={
            "confidence_floor": unit,
            "conditions": st.sampled_from(retrieval.CONDITIONS),
        },
    ),
)
