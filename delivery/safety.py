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


#: IPv6 ranges that are never a public destination, whatever they carry: IPv4-compatible
#: addresses (deprecated, RFC 4291 §2.5.5.1), site-local (deprecated, RFC 3879) and the
#: local-use NAT64 prefix (RFC 8215), where the embedded address sits wherever the local
#: operator's prefix length puts it.
_NEVER_PUBLIC = tuple(ipaddress.ip_network(net) for net in ("::/96", "fec0::/10", "64:ff9b:1::/48"))
#: Forms whose last 32 bits are the IPv4 address a packet to them reaches: the well-known NAT64
#: prefix (RFC 6052), IPv4-translated (RFC 2765) and IPv4-compatible addresses.
_LOW_32_BITS = tuple(
    ipaddress.ip_network(net) for net in ("64:ff9b::/96", "::ffff:0:0:0/96", "::/96")
)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, translated, compatible, NAT64,
    6to4, Teredo server and client): where a packet to it ends up."""
    if ip.ipv4_mapped:
        return [ip.ipv4_mapped]
    if any(ip in net for net in _LOW_32_BITS):
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour:
        return [ip.sixtofour]
    if ip.teredo:
        return list(ip.teredo)
    return []


def _allowed(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    # A wrapper form is judged by the addresses it carries, not by the wrapper's own range.
    carried = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
    reached = carried or [ip]
    if settings.RMS_WEBHOOKS_ALLOW_PRIVATE:
        return not any(a.is_multicast or a.is_unspecified for a in [ip, *reached])
    if isinstance(ip, ipaddress.IPv6Address) and any(ip in net for net in _NEVER_PUBLIC):
        return False
    return all(a.is_global and not a.is_multicast for a in reached)


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
                f"The host {host!r} resolves to a loopback, private or link-local address "
                "(or a reserved one, or an IPv6 form carrying one)."
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
