"""Who acts and when, shared by the write services: the acting ``Actor`` and the event-time
rules of SPEC §6 (no write in the future; a chain's times never go back)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from rms.errors import DomainError
from rms.models import ApiClient

DEFAULT_ACTOR_TYPE = "SYSTEM_PROCESS"


@dataclass(frozen=True)
class Actor:
    id: str
    type: str = DEFAULT_ACTOR_TYPE

    @classmethod
    def of(cls, client: ApiClient, actor_id: str | None = None, actor_type: str | None = None):
        """Without actor_id/actor_type the actor is the API client itself (SPEC §1)."""
        return cls(actor_id or client.name, actor_type or DEFAULT_ACTOR_TYPE)


def check_not_future(ts: datetime | None, field: str = "ts") -> None:
    if ts is not None and ts > timezone.now():
        raise DomainError(
            "ts_in_future",
            "ts may not be in the future.",
            400,
            {field: ["Must not be in the future."]},
        )


def resolve_ts(requested: datetime | None, latest: Iterable[datetime]) -> datetime:
    """The event time of a write on chains whose latest operations are at ``latest``.

    Called under the locks, so ``latest`` cannot move while we decide.
    """
    latest_ts = max(latest, default=None)
    current = timezone.now()
    if requested is None:
        return current if latest_ts is None or current >= latest_ts else latest_ts
    check_not_future(requested)
    if latest_ts is not None and requested < latest_ts:
        raise DomainError(
            "ts_out_of_order",
            f"ts {requested.isoformat()} is earlier than the latest operation "
            f"({latest_ts.isoformat()}) on an object this write touches.",
            409,
        )
    return requested
