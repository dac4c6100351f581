"""Input serializers of the webhook API: the body's shape (fields, types, choices), with unknown
fields refused as everywhere in the API (``StrictSerializer``). What needs the database or the
network (a safe URL, known namespaces) is checked by ``delivery.services``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from delivery.models import WebhookEndpoint
from rms import events
from rms.api.serializers import StrictCharField, StrictSerializer


@extend_schema_field(
    serializers.ListField(child=serializers.ChoiceField(choices=events.FEED_TYPES))
)
class EventTypesField(serializers.ListField):
    """Documented as a list of the feed's event types; the names themselves are checked by
    ``delivery.services`` (``rms.events.parse_types``), which refuses unknown ones under the
    list's own name."""

    child = StrictCharField(allow_blank=True, trim_whitespace=False)


_TYPES = EventTypesField(required=False, help_text="Event types to receive; empty means all.")
_NAMESPACES = serializers.ListField(
    child=StrictCharField(trim_whitespace=False),
    required=False,
    help_text="Namespaces; empty means all.",
)


class WebhookIn(StrictSerializer):
    url = StrictCharField(
        trim_whitespace=False,
        help_text="http(s); loopback and private addresses are refused.",
    )
    namespaces = _NAMESPACES
    event_types = _TYPES
    description = StrictCharField(
        required=False, allow_blank=True, max_length=500, trim_whitespace=False
    )


class WebhookPatch(StrictSerializer):
    state = serializers.ChoiceField(choices=WebhookEndpoint.STATES, required=False)
    url = StrictCharField(required=False, trim_whitespace=False)
    namespaces = _NAMESPACES
    event_types = _TYPES
    description = StrictCharField(
        required=False, allow_blank=True, max_length=500, trim_whitespace=False
    )
