"""The response analysis's verdicts and the scorer protocol every scorer follows.

Pure module: the standard library and the pure policy (rms.policy), no Django import."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rms.policy import REFERENCED as REFERENCED
from rms.policy import UNUSED as UNUSED

#: What the analyser answers for an object: one of rms.policy.DETECTED_SIGNAL_TYPES.
SignalType = str


@dataclass(frozen=True)
class DetectionInput:
    """One injected memory object: its id and its text."""

    object_id: str
    content: str


@dataclass(frozen=True)
class Detection:
    """The analyser's verdict for one injected object."""

    object_id: str
    signal_type: SignalType
    score: float
    reason: str


@runtime_checkable
class Scorer(Protocol):
    """Scores how strongly `response` uses `content`; REFERENCED when score >= threshold."""

    threshold: float

    def score(self, content: str, response: str) -> tuple[float, str]: ...


@runtime_checkable
class BatchScorer(Scorer, Protocol):
    """A scorer that can score many contents against one response, preparing it once."""

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]: ...
