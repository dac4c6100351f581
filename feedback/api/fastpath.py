"""A fast validator for well-formed feedback-session bodies (the batch endpoint's hot path).

DRF's nested serializers cost about 1.5 ms per session; this plain-Python check accepts exactly
the bodies ``SessionIn`` accepts in their ordinary form (strings as strings, integers as
integers) and returns the same validated data. Anything unusual — a wrong type, a blank string,
an unknown key — returns None, and the caller runs ``SessionIn``, which then reports the error in
its usual words (or accepts an unusual-but-valid form). ``test_fastpath`` checks the two agree.
"""

from __future__ import annotations

import math
import uuid

from rest_framework import serializers

from feedback.api.serializers import MAX_ENTRIES, MAX_INT
from feedback.utility import OUTCOMES
from rms import policy
from rms.api.serializers import StrictDateTimeField

SESSION_KEYS = frozenset(
    {
        "session_id",
        "request_id",
        "namespace_scope",
        "context_budget",
        "tokens_used",
        "context_text",
        "context_tags",
        "outcome",
        "ts",
        "injections",
        "signals",
        "response_text",
        "detect",
    }
)
INJECTION_KEYS = frozenset(
    {
        "object_id",
        "rank_position",
        "representation_type",
        "token_cost",
        "composite_score",
        "str_value",
    }
)
SIGNAL_KEYS = frozenset(
    {"object_id", "signal_type", "detection_method", "actor_id", "actor_type", "evidence_ids"}
)
SIGNAL_TYPES = frozenset(policy.SIGNAL_TYPES)
METHODS = frozenset(policy.DETECTION_METHODS)
ACTORS = frozenset(policy.ACTOR_TYPES)
OUTCOME_SET = frozenset(OUTCOMES)
_TS = StrictDateTimeField()


class _Reject(Exception):
    pass


def _text(value, max_length: int, *, blank: bool = False) -> str:
    if type(value) is not str or "\x00" in value:
        raise _Reject
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # lone surrogates: DRF refuses them
            raise _Reject from None
    value = value.strip()
    if (not value and not blank) or len(value) > max_length:
        raise _Reject
    return value


def _int(value, minimum: int) -> int:
    if type(value) is not int or not minimum <= value <= MAX_INT:
        raise _Reject
    return value


def _choice(value, allowed: frozenset) -> str:
    if type(value) is not str or value not in allowed:
        raise _Reject
    return value


def _number(value) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _Reject
    return float(value)


def _uuid(value) -> uuid.UUID:
    if type(value) is not str:
        raise _Reject
    try:
        return uuid.UUID(value)
    except ValueError:
        raise _Reject from None


def _tags(value) -> list[str]:
    if type(value) is not list or len(value) > 200:
        raise _Reject
    return [_text(v, 200) for v in value]


def _injection(entry) -> dict:
    if type(entry) is not dict or not entry.keys() <= INJECTION_KEYS:
        raise _Reject
    out = {
        "object_id": _uuid(entry.get("object_id")),
        "token_cost": _int(entry.get("token_cost"), 1),
    }
    if "rank_position" in entry:
        rank = entry["rank_position"]
        out["rank_position"] = None if rank is None else _int(rank, 1)
    if "representation_type" in entry:
        out["representation_type"] = _text(entry["representation_type"], 50, blank=True)
    for key in ("composite_score", "str_value"):
        if key in entry:
            out[key] = _number(entry[key])
    return out


def _signal(entry) -> dict:
    if type(entry) is not dict or not entry.keys() <= SIGNAL_KEYS:
        raise _Reject
    out = {
        "object_id": _uuid(entry.get("object_id")),
        "signal_type": _choice(entry.get("signal_type"), SIGNAL_TYPES),
    }
    if "detection_method" in entry:
        out["detection_method"] = _choice(entry["detection_method"], METHODS)
    if "actor_id" in entry:
        out["actor_id"] = _text(entry["actor_id"], 200)
    if "actor_type" in entry:
        out["actor_type"] = _choice(entry["actor_type"], ACTORS)
    if "evidence_ids" in entry:
        out["evidence_ids"] = _tags(entry["evidence_ids"])
    return out


def _entries(value, parse) -> list[dict]:
    if type(value) is not list or len(value) > MAX_ENTRIES:
        raise _Reject
    return [parse(entry) for entry in value]


def validate_session(body) -> dict | None:
    """The data ``SessionIn`` would produce, or None when only it can judge the body."""
    try:
        if type(body) is not dict or not body.keys() <= SESSION_KEYS:
            raise _Reject
        scope = body.get("namespace_scope")
        if type(scope) is not list or not 1 <= len(scope) <= 50:
            raise _Reject
        out = {
            "session_id": _text(body.get("session_id"), 200),
            "request_id": _text(body.get("request_id"), 200),
            "namespace_scope": list(dict.fromkeys(_text(n, 100) for n in scope)),
            "context_budget": _int(body.get("context_budget"), 0),
            "tokens_used": _int(body.get("tokens_used"), 0),
        }
        if "context_text" in body:
            out["context_text"] = _text(body["context_text"], 100_000, blank=True)
        if "context_tags" in body:
            out["context_tags"] = _tags(body["context_tags"])
        if "outcome" in body:
            outcome = body["outcome"]
            out["outcome"] = None if outcome is None else _choice(outcome, OUTCOME_SET)
        if "ts" in body:
            if type(body["ts"]) is not str:
                raise _Reject
            try:
                out["ts"] = _TS.to_internal_value(body["ts"])
            except serializers.ValidationError:
                raise _Reject from None
        if "response_text" in body:
            out["response_text"] = _text(body["response_text"], 200_000, blank=True)
        if "detect" in body:
            if type(body["detect"]) is not bool:
                raise _Reject
            out["detect"] = body["detect"]
            if out["detect"] and not out.get("response_text"):
                raise _Reject
        out["injections"] = _entries(body.get("injections", []), _injection)
        out["signals"] = _entries(body.get("signals", []), _signal)
    except _Reject:
        return None
    return out
