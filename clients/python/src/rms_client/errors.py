"""The one exception type of the client: the contract's error shape plus the HTTP status."""

from __future__ import annotations

from typing import Any

_STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    429: "throttled",
    500: "server_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "gateway_timeout",
}


class RMSError(Exception):
    """An error answer of the service (``{"error": {"code", "message", "fields"?}}``), a local
    validation failure, or a transport failure after the retries ran out.

    ``status`` is the HTTP status, or ``None`` when no answer came (``code`` is then
    ``connection_error`` or ``timeout``) or the check was local (``validation_error``).
    """

    def __init__(
        self,
        status: int | str | None = None,
        code: str | None = None,
        message: str = "",
        fields: dict[str, list[str]] | None = None,
        *,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        if isinstance(status, str) and code is None:  # RMSError("invalid_signature", ...)
            status, code = None, status
        self.status: int | None = status  # type: ignore[assignment]
        self.code: str = code or _STATUS_CODES.get(status or 0, "http_error")
        self.message: str = message or self.code.replace("_", " ")
        self.fields: dict[str, list[str]] | None = fields
        self.retry_after = retry_after
        self.body = body
        super().__init__(self.message)

    @classmethod
    def from_response(cls, status: int, body: Any, retry_after: float | None = None) -> RMSError:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            return cls(
                status,
                str(error.get("code") or _STATUS_CODES.get(status, "http_error")),
                str(error.get("message") or ""),
                error.get("fields"),
                retry_after=retry_after,
                body=body,
            )
        return cls(status, None, f"HTTP {status}", None, retry_after=retry_after, body=body)

    def as_dict(self) -> dict[str, Any]:
        """The error in the contract's shape (what ``on_error`` callbacks log or store)."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.fields:
            error["fields"] = self.fields
        return {"status": self.status, "error": error}

    def __str__(self) -> str:
        head = f"{self.status} {self.code}" if self.status else self.code
        text = f"{head}: {self.message}"
        if self.fields:
            text += f" {self.fields}"
        return text

    def __repr__(self) -> str:
        return (
            f"RMSError(status={self.status!r}, code={self.code!r}, message={self.message!r}, "
            f"fields={self.fields!r})"
        )


class RMSValidationError(RMSError, ValueError):
    """A check the client makes before anything is sent (status ``None``)."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(None, "validation_error", message, fields)
