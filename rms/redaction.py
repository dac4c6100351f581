"""Erasure's pure rules: what a personal field is, what it becomes, and the digests that let
``rms.verification`` accept a redacted operation (docs/DECISIONS.md "Erasure").

No Django import. Free texts become ``""``, tag lists ``[]``; actor ids and evidence ids become a
stable pseudonym (a keyed hash), because the policy compares them (a session's repeat tally is
keyed by actor, a signal's evidence is matched against the object's): an injective renaming keeps
every comparison, so replay folds the redacted log to the same numbers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Free texts (emptied) and tag lists (emptied) wherever they occur in a JSON value.
TEXT_KEYS = frozenset({"content", "reason", "context_text", "response_text"})
TAG_KEYS = frozenset({"domain_tags", "context_tags"})
#: Identifiers of people or their documents: renamed to their pseudonym.
ACTOR_KEYS = frozenset({"actor_id", "signal_source", "created_by"})
EVIDENCE_KEYS = frozenset({"evidence_ids"})

PSEUDONYM_PREFIX = "erased-"
#: The operation type of an erasure receipt on a namespace's chain; never itself redactable.
ERASURE_OP = "ERASURE"
#: The operation on each erased object's chain behind the ``object.erased`` change event.
OBJECT_ERASED_OP = "OBJECT_ERASED"

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def pseudonym(key: bytes, value: str) -> str:
    """The stable stand-in for an identifier: the same value always maps to the same text, and
    without ``key`` (kept outside the database) it cannot be inverted or recomputed."""
    if is_pseudonym(value):
        return value
    digest = hmac.new(key, value.encode(), hashlib.sha256).hexdigest()[:32]
    return PSEUDONYM_PREFIX + digest


def is_pseudonym(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PSEUDONYM_PREFIX) and len(value) == 39


@dataclass(frozen=True)
class Rule:
    """What one erasure removes from a JSON value.

    ``texts``: empty free texts and tag lists. ``actors``: the actor ids to rename (None: every
    actor id). ``evidence``: rename evidence ids.
    """

    key: bytes
    texts: bool = True
    actors: frozenset[str] | None = frozenset()
    evidence: bool = True

    def actor(self, value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        if self.actors is None or value in self.actors:
            return pseudonym(self.key, value)
        return value

    def scrub(self, value: Any) -> Any:
        """``value`` with its personal fields replaced (a new value; the input is untouched)."""
        if isinstance(value, dict):
            return {k: self._field(k, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value

    def _field(self, key: str, value: Any) -> Any:
        if self.texts and key in TEXT_KEYS and isinstance(value, str):
            return ""
        if self.texts and key in TAG_KEYS and isinstance(value, list):
            return []
        if key in ACTOR_KEYS:
            return self.actor(value)
        if self.evidence and key in EVIDENCE_KEYS and isinstance(value, list):
            # The policy keeps evidence sorted and unique; so does its renaming.
            return sorted({pseudonym(self.key, v) if isinstance(v, str) else v for v in value})
        return self.scrub(value)


def canonical(value: Any) -> str:
    return _CANONICAL.encode(value)


def residual_digest(row: dict) -> str:
    """The digest of a redacted operation's row (``rms.oplog.row_for_hash`` after redaction):
    recorded in the ERASURE operation, it pins every byte that stays — the numbers, the links
    and the pseudonyms — once the original hash can no longer be recomputed."""
    return hashlib.sha256(b"redacted:" + canonical(row).encode()).hexdigest()


def receipt_mac(key: bytes, payload: dict) -> str:
    """The keyed MAC of an ERASURE operation's payload (without its ``mac``): only the service,
    which holds ``key`` outside the database, can write a receipt that verification trusts."""
    body = {k: v for k, v in payload.items() if k != "mac"}
    return hmac.new(key, canonical(body).encode(), hashlib.sha256).hexdigest()


def receipt_ok(key: bytes, payload: Any) -> bool:
    if not isinstance(payload, dict) or not isinstance(payload.get("mac"), str):
        return False
    return hmac.compare_digest(payload["mac"], receipt_mac(key, payload))


def listed(payload: dict) -> list[tuple[str, str]]:
    """The (original hash, residual digest) pairs an ERASURE payload lists."""
    pairs = payload.get("redacted") or []
    return [(h, d) for h, d in pairs if isinstance(h, str) and isinstance(d, str)]


class Registry:
    """The redactions that verification accepts: original hash → (residual digest, the
    ERASURE operation's seq). Built from ERASURE operations whose own hash and MAC check; a
    later erasure of the same operation supersedes an earlier one."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[str, int]] = {}

    def add(self, erasure_seq: int, payload: dict) -> None:
        for original, digest in listed(payload):
            known = self.entries.get(original)
            if known is None or known[1] < erasure_seq:
                self.entries[original] = (digest, erasure_seq)

    def accepts(self, seq: int, stored_hash: str, row: dict) -> bool:
        """True when a later ERASURE lists ``stored_hash`` with this row's residual digest."""
        entry = self.entries.get(stored_hash)
        if entry is None:
            return False
        digest, erasure_seq = entry
        return erasure_seq > seq and hmac.compare_digest(digest, residual_digest(row))


class LazyRegistry:
    """A Registry loaded on first use (``load``): a log without erasures never reads one."""

    def __init__(self, load: Callable[[], Registry]) -> None:
        self._load = load
        self._registry: Registry | None = None

    def get(self) -> Registry:
        if self._registry is None:
            self._registry = self._load()
        return self._registry


# --- the personal fields of each kind of row: one definition, for the database and the archive --


def redact_op(rule: Rule, payload: Any, state: Any, actor_id: str) -> tuple[Any, Any, str] | None:
    """An operation's ``(payload, state, actor_id)`` without its personal fields, or None when
    the rule changes nothing (an operation already redacted stays as it is)."""
    out = (rule.scrub(payload), rule.scrub(state), rule.actor(actor_id))
    return None if out == (payload, state, actor_id) else out


def redact_session(rule: Rule, context_text: str, context_tags: list, record: Any) -> tuple:
    """A feedback session's ``(context_text, context_tags, record)`` without personal fields."""
    return "", [], rule.scrub(record)


def redact_signal(rule: Rule, reason: str, actor_id: str) -> tuple[str, str]:
    """A signal record's ``(reason, actor_id)`` without personal fields."""
    return "", rule.actor(actor_id)


def rename_tally_keys(rule: Rule, repeats: dict) -> dict:
    """Per-session repeat tallies keyed ``actor \\x1f signal type``: the actor part renamed as
    in the log, so replay and a later signal still meet the same key."""
    renamed = {}
    for key, count in repeats.items():
        actor, sep, signal = key.partition("\x1f")
        renamed[f"{rule.actor(actor)}{sep}{signal}"] = count
    return renamed


def redact_fold(rule: Rule, fold: dict | None) -> dict | None:
    """A replay fold stored at a retention cut (``rms.replay.fold_to_json`` plus ``state_op``)
    as the redacted archived operations replay to: its state scrubbed, its tallies renamed."""
    if not fold:
        return fold
    tallies = {
        sid: {**t, "repeats": rename_tally_keys(rule, t["repeats"])}
        for sid, t in fold.get("tallies", {}).items()
    }
    return {**fold, "state": rule.scrub(fold.get("state")), "tallies": tallies}
