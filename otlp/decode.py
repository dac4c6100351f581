"""OTLP/HTTP bodies in and out (the OTLP specification, "OTLP/HTTP"), with no Django import.

Requests are decoded with the official ``opentelemetry-proto`` messages: binary protobuf, or
the JSON mapping through protobuf's ``json_format``. Every way a body can be refused is an
``OtlpError`` carrying its HTTP status; the view renders it in the content type of the request.

A gzip body is inflated as a stream with a cap on the output, so a small body that would
inflate to gigabytes (a gzip bomb) is refused after at most ``max_bytes`` + one chunk.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import dataclass

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from rms.jsondepth import MAX_DEPTH, nesting_depth

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)

#: Inflated in steps of this many bytes, so the output never passes the cap by more.
INFLATE_STEP = 64 * 1024

#: google.rpc.Code values for the statuses the endpoint answers (the OTLP spec's Status body).
RPC_CODES = {
    400: 3,  # INVALID_ARGUMENT
    401: 16,  # UNAUTHENTICATED
    403: 7,  # PERMISSION_DENIED
    404: 5,  # NOT_FOUND
    405: 12,  # UNIMPLEMENTED
    413: 8,  # RESOURCE_EXHAUSTED
    415: 3,
    429: 8,
    503: 14,  # UNAVAILABLE
}

_HEX_ID = re.compile(r"[0-9a-fA-F]+")


@dataclass(frozen=True)
class OtlpError(Exception):
    status: int
    code: str
    message: str


def media_type(content_type: str | None) -> str | None:
    """The request's encoding, or None for one OTLP/HTTP does not define."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    return base if base in CONTENT_TYPES else None


def inflate(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The body without its Content-Encoding; at most ``max_bytes`` after decompression."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        data = body
    elif encoding == "gzip":
        data = _gunzip(body, max_bytes)
    else:
        raise OtlpError(
            415, "unsupported_encoding", f"Content-Encoding {encoding!r} is not supported; "
            "send gzip or no encoding."
        )  # fmt: skip
    if len(data) > max_bytes:
        raise _too_large(max_bytes)
    return data


def _too_large(max_bytes: int) -> OtlpError:
    return OtlpError(
        413, "request_too_large", f"The request body is larger than {max_bytes} bytes."
    )


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    pending = body
    try:
        while True:
            chunk = inflater.decompress(pending, INFLATE_STEP)
            out += chunk
            if len(out) > max_bytes:
                raise _too_large(max_bytes)
            pending = inflater.unconsumed_tail
            if not pending and not chunk:
                break
            if inflater.eof:
                break
    except zlib.error as exc:
        raise OtlpError(400, "bad_gzip", f"The gzip body does not decompress: {exc}.") from None
    if not inflater.eof:
        raise OtlpError(400, "bad_gzip", "The gzip body is truncated.")
    return bytes(out)


def parse_request(data: bytes, media: str) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest from protobuf bytes or OTLP/JSON text."""
    message = ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            message.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise OtlpError(
                400, "malformed_protobuf", f"The body is not an ExportTraceServiceRequest: {exc}"
            ) from None
        return message
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OtlpError(400, "malformed_json", f"The body is not JSON: {exc}.") from None
    # json recurses once per level: a deep body is refused before it can exhaust the stack.
    if nesting_depth(text) > MAX_DEPTH:
        raise OtlpError(
            400, "malformed_json", f"The JSON is nested more than {MAX_DEPTH} levels deep."
        )
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise OtlpError(400, "malformed_json", f"The body is not JSON: {exc}.") from None
    if not isinstance(document, dict):
        raise OtlpError(400, "malformed_json", "The body must be a JSON object.")
    try:
        _hex_ids_to_base64(document)
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError, AttributeError) as exc:
        raise OtlpError(
            400, "malformed_json", f"The body is not an OTLP/JSON trace export: {exc}"
        ) from None
    return message


def _hex_ids_to_base64(document: dict) -> None:
    """OTLP/JSON writes trace and span ids as hex (not protobuf JSON's base64); both are taken:
    a 32- or 16-character hex string is converted, anything else is left to json_format."""
    for rs in _items(document, "resourceSpans", "resource_spans"):
        for ss in _items(rs, "scopeSpans", "scope_spans"):
            for span in _items(ss, "spans"):
                _fix(span)
                for link in _items(span, "links"):
                    _fix(link)


def _items(parent, *keys: str) -> list:
    if not isinstance(parent, dict):
        return []
    for key in keys:
        value = parent.get(key)
        if isinstance(value, list):
            return value
    return []


def _fix(span) -> None:
    if not isinstance(span, dict):
        return
    for key in ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"):
        value = span.get(key)
        if isinstance(value, str) and len(value) in (16, 32) and _HEX_ID.fullmatch(value):
            span[key] = base64.b64encode(binascii.unhexlify(value)).decode()


def span_count(message: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in message.resource_spans for ss in rs.scope_spans)


def decode(
    body: bytes,
    *,
    content_type: str | None,
    content_encoding: str | None,
    max_bytes: int,
    max_spans: int,
) -> ExportTraceServiceRequest:
    media = media_type(content_type)
    if media is None:
        raise OtlpError(
            415, "unsupported_media_type",
            f"Send {PROTOBUF} or {JSON} (OTLP/HTTP), not {content_type or 'no content type'!r}.",
        )  # fmt: skip
    message = parse_request(inflate(body, content_encoding, max_bytes), media)
    count = span_count(message)
    if count > max_spans:
        raise OtlpError(
            413, "too_many_spans",
            f"The export holds {count} spans; send at most {max_spans} spans per request "
            "(a smaller max_export_batch_size).",
        )  # fmt: skip
    return message


def encode_response(media: str, rejected: int, message: str) -> bytes:
    """The ExportTraceServiceResponse: empty on full success, else partial_success."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if media == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()


def encode_status(status: int, message: str) -> bytes:
    """A google.rpc.Status, the error body of a protobuf request (OTLP/HTTP "Failures")."""
    return status_pb2.Status(code=RPC_CODES.get(status, 2), message=message).SerializeToString()
