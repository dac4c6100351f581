"""Core write services (STYLE §2), one module per concern: each write is one transaction that
changes objects and appends the operations that record the change (SPEC §6). Reads are in
``rms.selectors``.

Locks: every write locks the objects it touches once, in primary-key order (``rms.store``), and
holds no lock across network calls. Retries: none of these functions retries on its own; each
either commits entirely or raises and writes nothing.

The public functions are re-exported here, so callers write ``services.object_create(...)``
whichever module holds them.
"""

from rms.services.common import DEFAULT_ACTOR_TYPE, Actor, check_not_future, resolve_ts
from rms.services.namespaces import (
    namespace_create,
    namespace_for_write,
    namespace_set_retention,
    namespace_update,
)
from rms.services.objects import object_create
from rms.services.signals import (
    SignalResult,
    load_tallies,
    signal_ops,
    tally_ledger,
    validate_client_signal,
    weights_of,
    write_tallies,
)
from rms.services.transitions import (
    object_condition,
    object_pin,
    object_transition,
    object_unpin,
)

__all__ = [
    "DEFAULT_ACTOR_TYPE",
    "Actor",
    "SignalResult",
    "check_not_future",
    "load_tallies",
    "namespace_create",
    "namespace_for_write",
    "namespace_set_retention",
    "namespace_update",
    "object_condition",
    "object_create",
    "object_pin",
    "object_transition",
    "object_unpin",
    "resolve_ts",
    "signal_ops",
    "tally_ledger",
    "validate_client_signal",
    "weights_of",
    "write_tallies",
]
