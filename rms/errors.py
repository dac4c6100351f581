"""The one domain exception type; the API maps it to the contract's error shape (STYLE §9)."""

from __future__ import annotations


class DomainError(Exception):
    def __init__(
        self, code: str, message: str, status: int = 400, fields: dict | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.fields = fields


class NotFound(DomainError):
    def __init__(self, message: str = "Not found.") -> None:
        super().__init__("not_found", message, 404)


class Forbidden(DomainError):
    def __init__(self, message: str = "You do not have permission to do this.") -> None:
        super().__init__("forbidden", message, 403)


def unknown_fields(data: dict, allowed) -> dict[str, list[str]]:
    """The refusal of each body field not in ``allowed``, sorted by name (empty when none): a
    misspelt optional field is never silently ignored. Input serializers and the services that
    take a field dict from other callers both refuse with this."""
    return {name: ["Unknown field."] for name in sorted(set(data) - set(allowed))}
