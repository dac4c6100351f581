"""The ranking snapshot (API.md ``GET /ranking-state``): every object's ranking inputs in one
namespace, by pages, with the change-feed cursor from which the snapshot plus the feed is exact.

Why it is exact without one transaction across pages (docs/DECISIONS.md, "Score mirror"): the
feed head ``F`` is read *before* any page. Every change at or before ``F`` has committed by
then, so every row read afterwards reflects it. A change after ``F`` may or may not be
reflected in a row (it may commit between two pages, or between the head and the first page),
and it is delivered by ``/changes?after=F`` either way; each object event carries the
object's ``version`` after it, and each row carries the version it was read at, so a consumer
applies an event only when its version is above the one it holds: a reflected change is not
applied twice, an unreflected one is not lost. Each row is one statement (object joined with
its aggregate), so its version and its utility are of the same commit.

The page cursor is signed (Django's signing, the deployment's secret): it names the namespace,
the last object id and ``F``, and any edit of it is a 400. ``F``, like every feed cursor, names
the deployment that issued it (``rms.deployment``): a page cursor of another deployment that
shares the secret is a 400 ``foreign_cursor``.
"""

from __future__ import annotations

from django.core import signing
from rest_framework.exceptions import ValidationError

from feedback import utility
from feedback.retrieval import profile_out
from feedback.selectors import namespace_profile
from rms import changes, events
from rms.models import MemoryObject, Namespace
from rms.replay import iso

DEFAULT_PAGE_SIZE = 1000
MAX_PAGE_SIZE = 5000
_SALT = "rms.ranking-state"

_OBJECT_COLUMNS = (
    "id",
    "version",
    "epistemic_type",
    "condition_state",
    "confidence",
    "salience_base",
    "reinforcement_boost",
    "decay_profile",
    "pinned",
    "last_reinforced_at",
    "created_at",
)
_AGGREGATE_COLUMNS = ("aggregate__utility", "aggregate__uses", "aggregate__last_use_at")


def _bad_cursor() -> ValidationError:
    message = "Invalid cursor (not issued for this namespace, or edited)."
    return ValidationError({"cursor": [message]})


def encode_page_cursor(namespace: str, after_id: str, feed_cursor: str) -> str:
    return signing.dumps([namespace, after_id, feed_cursor], salt=_SALT, compress=False)


def decode_page_cursor(raw: str, namespace: str) -> tuple[str, str]:
    """(last object id, feed cursor) of a page cursor; a 400 when it was edited or names
    another namespace."""
    try:
        value = signing.loads(raw, salt=_SALT)
    except signing.BadSignature as exc:
        raise _bad_cursor() from exc
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, str) for v in value)
        or value[0] != namespace
    ):
        raise _bad_cursor()
    # Signed with this deployment's secret, but another deployment may share the secret (a
    # copy of its settings): the feed cursor inside names its issuer, a ``foreign_cursor``.
    try:
        changes.position(value[2], "cursor")
    except events.FeedError as exc:
        raise _bad_cursor() from exc
    return value[1], value[2]


def row_out(row: dict) -> dict:
    """One object's ranking inputs as the API answers them."""
    uses = row["aggregate__uses"]
    return {
        "object_id": str(row["id"]),
        "version": row["version"],
        "epistemic_type": row["epistemic_type"],
        "condition_state": row["condition_state"],
        "confidence": row["confidence"],
        "salience_base": row["salience_base"],
        "reinforcement_boost": row["reinforcement_boost"],
        "decay_profile": row["decay_profile"],
        "pinned": row["pinned"],
        "last_reinforced_at": iso(row["last_reinforced_at"]),
        "created_at": iso(row["created_at"]),
        # No aggregate yet: the start values (SPEC §12), as ``selectors.ranking_inputs``.
        "utility": utility.UTILITY_START if uses is None else row["aggregate__utility"],
        "uses": 0 if uses is None else uses,
        "last_use_at": iso(row["aggregate__last_use_at"]),
    }


def ranking_state(ns: Namespace, cursor: str | None, size: int = DEFAULT_PAGE_SIZE) -> dict:
    """One page of ``ns``'s ranking snapshot (object id order) and the feed cursor at which
    the whole snapshot is exact; ``next_cursor`` None on the last page."""
    if cursor:
        after_id, feed_cursor = decode_page_cursor(cursor, ns.name)
    else:
        # The head first, then the rows (the module docstring says why this order).
        after_id, feed_cursor = "", changes.cursor(changes.head())
    qs = MemoryObject.objects.filter(namespace=ns).order_by("id")
    if after_id:
        qs = qs.filter(id__gt=after_id)
    rows = list(qs.values(*_OBJECT_COLUMNS, *_AGGREGATE_COLUMNS)[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return {
        "namespace": ns.name,
        "feed_cursor": feed_cursor,
        "profile": profile_out(namespace_profile(ns)),
        "event_types": list(MIRROR_TYPES),
        "results": [row_out(row) for row in rows],
        "next_cursor": (
            encode_page_cursor(ns.name, str(rows[-1]["id"]), feed_cursor) if more else None
        ),
    }


#: The feed types a mirror follows: every object event (state and ranking inputs) and the
#: namespace's retrieval profile.
MIRROR_TYPES = (
    events.OBJECT_CREATED,
    events.OBJECT_REINFORCED,
    events.OBJECT_PENALIZED,
    events.OBJECT_PINNED,
    events.OBJECT_UNPINNED,
    events.OBJECT_TRANSITIONED,
    events.OBJECT_DEPRECATED,
    events.OBJECT_CONDITION_CHANGED,
    events.OBJECT_RANKING,
    events.OBJECT_ERASED,
    events.NAMESPACE_PROFILE_CHANGED,
)
