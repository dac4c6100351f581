"""Dashboard forms: input checking only; the services decide what is allowed (SPEC §1)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django import forms

MAX_REASON = 500
#: One bulk action touches at most one page of the queue (the largest page size).
MAX_BULK = 200


class ReasonForm(forms.Form):
    """Unpin and deprecate: every admin action is on record with its reason."""

    reason = forms.CharField(max_length=MAX_REASON, strip=True)


class PinForm(ReasonForm):
    confidence = forms.FloatField(required=False, min_value=0.0, max_value=1.0)


class UUIDListField(forms.Field):
    """Several ``name=<uuid>`` values (checkboxes), de-duplicated, in the order posted."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value):
        out = []
        for raw in value or []:
            try:
                out.append(uuid.UUID(str(raw)))
            except ValueError as exc:
                raise forms.ValidationError("Malformed object id.") from exc
        return list(dict.fromkeys(out))

    def validate(self, value):
        if not value:
            raise forms.ValidationError("Select at least one object.")
        if len(value) > MAX_BULK:
            raise forms.ValidationError(f"Select at most {MAX_BULK} objects at a time.")


class BulkDeprecateForm(ReasonForm):
    # Any ids may be posted; the service checks visibility and state object by object.
    ids = UUIDListField()


class BulkActionForm(BulkDeprecateForm):
    """The objects browser's bulk action: pin (keeping each confidence) or deprecate."""

    action = forms.ChoiceField(choices=(("pin", "pin"), ("deprecate", "deprecate")))


def parse_utc(raw: str | None) -> datetime | None:
    """A ``datetime-local`` value (or any ISO 8601 text) read as UTC; None if absent or bad."""
    if not raw:
        return None
    raw = raw.strip()
    # A "+" of an offset arrives as a space when the query string was not encoded.
    raw = raw.replace(" ", "+") if "T" in raw else raw.replace(" ", "T", 1)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # past year 9999 (or before year 1) once in UTC: not a time we know
        return None


def task_params(kind_spec, data) -> tuple[dict, dict[str, str]]:
    """Form strings → typed task params (``taskruns.kinds.Param``); empty fields keep the
    kind's default. Returns (params, errors); bounds are checked by ``task_start``."""
    params: dict = {}
    errors: dict[str, str] = {}
    for name, spec in kind_spec.params.items():
        raw = (data.get(name) or "").strip()
        if raw == "":
            continue
        if spec.type == "namespace":
            params[name] = raw
        elif spec.type == "int":
            try:
                params[name] = int(raw)
            except ValueError:
                errors[name] = "Must be a whole number."
        else:
            try:
                params[name] = float(raw)
            except ValueError:
                errors[name] = "Must be a number."
    return params, errors
