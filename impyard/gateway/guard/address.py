"""What an upstream's host names, judged one way by preflight, ``deploy`` and the gateway.

A host is an IP literal in any spelling a resolver accepts, or a name. The spellings
resolvers accept for IPv4 (``inet_aton``'s: ``127.1``, ``2130706433``, ``0x7f.1``,
``017700000001``) are read here rather than left to the resolver, so each spelling of an
address is judged as that address whatever the host's libc does; IPv6 may carry
brackets, and an IPv6 address that embeds an IPv4 one (``::ffff:127.0.0.1``, NAT64's
``64:ff9b::/96``) is judged as the IPv4 address it reaches. A name is resolved with
``getaddrinfo``, as the gateway connects. An address is public when ``ipaddress`` calls
it global: loopback, private, link-local, shared (``100.64.0.0/10``), unspecified and
unique-local addresses are not.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_PART = re.compile(r"0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*")
#: IPv6 ranges whose low 32 bits are an IPv4 address the packet ends up at: mapped,
#: NAT64's well-known prefix, and the deprecated IPv4-compatible form.
_EMBEDS_IPV4 = (
    ipaddress.IPv6Network("::ffff:0:0/96"),
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("::/96"),
)


class AddressError(Exception):
    """A host name that does not resolve."""


@dataclass(frozen=True)
class Resolved:
    """The addresses ``host`` names, each with the socket family and the string to
    connect to (an IPv6 zone kept)."""

    host: str
    literal: bool
    found: tuple[tuple[int, str, Address], ...]

    @property
    def nonpublic(self) -> list[Address]:
        return [a for _, _, a in self.found if not is_public(a)]

    @property
    def private_only(self) -> bool:
        """Every address is non-public: nothing here may be reached without the owner's
        opt-in."""
        return bool(self.found) and len(self.nonpublic) == len(self.found)

    def describe(self) -> str:
        """How the host came to name its non-public addresses, for a refusal."""
        shown = ", ".join(dict.fromkeys(str(_shown(a)) for a in self.nonpublic))
        if not self.literal:
            return f"{self.host} resolves to non-public address {shown}"
        if shown == self.host:
            return f"{self.host} is a non-public address"
        return f"{self.host} is the non-public address {shown}"


def literal(host: str) -> Address | None:
    """The address ``host`` spells, when it is an IP literal in any accepted spelling."""
    text = host.strip().lower().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        found: Address = ipaddress.ip_address(text)
    except ValueError:
        v4 = _inet_aton(text)
        if v4 is None:
            return None
        found = v4
    return found


def embedded(address: Address) -> Address:
    """The IPv4 address an IPv6 one reaches through its low 32 bits, else itself."""
    if not isinstance(address, ipaddress.IPv6Address) or address.scope_id is not None:
        return address
    if any(address in network for network in _EMBEDS_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def is_public(address: Address) -> bool:
    return embedded(address).is_global


def _shown(address: Address) -> Address:
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address if mapped is None else mapped


def lookup(host: str, port: int | None = None) -> Resolved:
    """What ``host`` names: a literal as the address it spells, a name as ``getaddrinfo``
    resolves it. Raises AddressError for a name that does not resolve."""
    spelled = literal(host)
    if spelled is not None:
        family = socket.AF_INET6 if spelled.version == 6 else socket.AF_INET
        return Resolved(host, True, ((family, str(spelled), spelled),))
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid name"
        raise AddressError(f"cannot resolve {host}: {reason}") from exc
    found: dict[tuple[int, str], Address] = {}
    for family, _type, _proto, _canon, sockaddr in infos:
        connect_to = str(sockaddr[0])
        found.setdefault((family, connect_to), ipaddress.ip_address(connect_to.split("%", 1)[0]))
    return Resolved(host, False, tuple((f, s, a) for (f, s), a in found.items()))


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """IPv4 in the forms ``inet_aton`` takes: one to four parts, each decimal, octal
    (leading 0) or hex (0x); the last fills the bytes the others leave."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.fullmatch(part) for part in parts):
        return None
    values = [_number(part) for part in parts]
    *leading, last = values
    if any(value > 0xFF for value in leading) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for at, value in enumerate(leading):
        number |= value << (8 * (3 - at))
    return ipaddress.IPv4Address(number)


def _number(part: str) -> int:
    if part.startswith("0x"):
        return int(part[2:], 16)
    return int(part, 8 if part.startswith("0") else 10)
