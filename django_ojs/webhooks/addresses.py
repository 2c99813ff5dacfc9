"""Which endpoints a webhook may reach: URL rules and the address check (SSRF guard).

A subscription URL is ``https://`` (``http://`` only with ``OJS_WEBHOOKS_ALLOW_HTTP``),
without credentials. Its host must resolve to public addresses only: loopback, private,
link-local, shared (100.64/10), unspecified, multicast and reserved addresses are refused
unless ``OJS_WEBHOOKS_ALLOW_PRIVATE`` (OJS security: a job server must not become a proxy
into its own network). The check runs when a subscription is saved and again at each
delivery, on the addresses the delivery then connects to (no second lookup that DNS
rebinding could answer differently). No database access.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

from django_ojs.exceptions import ValidationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_LENGTH = 2048
#: RFC 6598 shared address space (carrier-grade NAT): not public, not ``is_private``.
SHARED = ipaddress.ip_network("100.64.0.0/10")


class AddressRefused(ValueError):
    """The endpoint's host is, or resolves to, an address webhooks may not reach."""


class Unresolvable(OSError):
    """The endpoint's host name does not resolve."""


def parse_url(url: object, *, allow_http: bool, field: str = "url") -> SplitResult:
    """Check a subscription URL's form (not its addresses); raise ``ValidationError``."""
    if not isinstance(url, str) or not url:
        raise ValidationError(f"{field} must be a non-empty string", field=field)
    if len(url) > MAX_URL_LENGTH or any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise ValidationError(
            f"{field} must be a URL of at most {MAX_URL_LENGTH} characters, without spaces",
            field=field,
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValidationError(f"{field} is not a valid URL", field=field) from None
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        raise ValidationError(
            f"{field} must be an {' or '.join(schemes)} URL"
            + ("" if allow_http else " (http only with OJS_WEBHOOKS_ALLOW_HTTP)"),
            field=field,
        )
    if not parts.hostname:
        raise ValidationError(f"{field} has no host", field=field)
    if parts.username is not None or parts.password is not None:
        raise ValidationError(f"{field} must not carry credentials", field=field)
    if port == 0:
        raise ValidationError(f"{field} has an invalid port", field=field)
    return parts


def default_port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be reached (``None``: it is a public unicast address)."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return refusal(mapped)
    for reason, hit in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("shared", isinstance(address, ipaddress.IPv4Address) and address in SHARED),
        ("not global", not address.is_global),
    ):
        if hit:
            return reason
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to for TCP, in the resolver's order, no repeats."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Unresolvable(f"{host} does not resolve: {exc}") from None
    out: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in out:
            out.append(address)
    if not out:
        raise Unresolvable(f"{host} does not resolve")
    return out


def checked(host: str, port: int, *, allow_private: bool) -> list[IPAddress]:
    """The addresses of ``host`` a delivery may connect to: all of them, or raise
    :class:`AddressRefused` when any is not public (unless ``allow_private``)."""
    addresses = resolve(host, port)
    if not allow_private:
        for address in addresses:
            reason = refusal(address)
            if reason is not None:
                raise AddressRefused(
                    f"{host} resolves to {address}, a {reason} address: webhooks may only "
                    "reach public addresses (OJS_WEBHOOKS_ALLOW_PRIVATE allows others)"
                )
    return addresses
