"""Where a webhook may be sent (SSRF): http(s) URLs whose host resolves only to public addresses,
unless ``RMS_WEBHOOKS_ALLOW_PRIVATE`` allows loopback and private ones (development, tests).

The dispatcher resolves the host again before every attempt and connects to the address it
checked (``pinned``), so a name that later resolves to an internal address (DNS rebinding) is
refused rather than followed; redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings


class UnsafeURL(ValueError):
    """A URL the service will not call; the message is safe to show (it names no secret)."""


@dataclass(frozen=True)
class Target:
    url: str  # the URL with the host replaced by the checked address
    host: str  # the original host name, for TLS SNI and the certificate check
    address: str  # the checked address: the only one ever connected to
    scheme: str
    port: int  # the URL's port, or its scheme's default
    path: str  # the request target: path and query, never the fragment
    host_header: str  # the URL's host as written (IPv6 in brackets), with its port if any


def check_syntax(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an acceptable URL, or UnsafeURL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL("The URL is malformed.") from exc
    if parts.scheme not in ("http", "https"):
        raise UnsafeURL("The URL must be http or https.")
    if not parts.hostname:
        raise UnsafeURL("The URL needs a host.")
    if parts.username or parts.password:
        raise UnsafeURL("The URL must not carry credentials.")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _allowed(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if settings.RMS_WEBHOOKS_ALLOW_PRIVATE:
        return not ip.is_multicast and not ip.is_unspecified
    return ip.is_global and not ip.is_multicast


def resolve(url: str) -> Target:
    """The address to connect to for ``url``: every address the host resolves to must be
    allowed (a name with one internal address among public ones is refused)."""
    scheme, host, port = check_syntax(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeURL(f"The host {host!r} cannot be resolved.") from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise UnsafeURL(f"The host {host!r} cannot be resolved.")
    for address in addresses:
        if not _allowed(address):
            raise UnsafeURL(
                f"The host {host!r} resolves to a loopback, private or link-local address."
            )
    address = addresses[0]
    parts = urlsplit(url)
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    name = f"[{host}]" if ":" in host else host
    return Target(
        url=parts._replace(netloc=netloc).geturl(),
        host=host,
        address=address,
        scheme=scheme,
        port=port,
        path=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
        host_header=f"{name}:{parts.port}" if parts.port else name,
    )
