"""Host names and addresses, canonicalised once (SPEC §22 *Network*).

Every host the proxy judges, and every pattern of a ``NetworkPolicy``, goes through
``canonical_host``: the text it returns is the one matched against the policy *and* the one
resolved, so no second reading of the name (a resolver stopping at a NUL, a client folding
case or mapping Unicode differently) can reach anything the match did not see.

- ASCII names: case-folded, one trailing dot dropped, then only letters, digits, ``-`` and
  ``_`` in labels of 1 to 63 characters, 253 in all.
- Other names: refused when they hold a control, format, private-use, unassigned or separator
  character (NUL, tab, newline, soft hyphen, zero-width joiners, spaces, ...); otherwise
  IDNA-encoded with the ``idna`` package (UTS #46 mapping, non-transitional: what browsers and
  curl's libidn2 send) and then held to the ASCII rules. Without ``idna`` installed a
  non-ASCII name is refused, never guessed at.
- IP literals: an IPv4 address in every spelling ``inet_aton`` accepts (``127.1``,
  ``0x7f.1``, ``2130706433``, ``0177.0.0.1``) and an IPv6 address (in brackets for a request)
  are recognised as addresses, so a policy names an address by its value, not by one spelling.
  A name whose last label is a number but that is no valid address (``1.2.3.4.5``) is refused.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from dataclasses import dataclass
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_MAX_RAW: Final = 1024  # no IDNA work on absurd inputs; a real name is at most 253 octets
_MAX_NAME: Final = 253
_MAX_LABEL: Final = 63
_LABEL_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_ASCII_NAME_CHARS: Final = _LABEL_CHARS | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ.")
_HEX: Final = frozenset("0123456789abcdef")


class HostError(ValueError):
    """A host that cannot be judged; ``reason`` is the event's reason (``invalid_host``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Host:
    """A canonical host: ``text`` is the ASCII name, or the address's canonical spelling when
    ``address`` is set (an IP literal)."""

    text: str
    address: IPAddress | None = None


def printable(raw: str, limit: int = 200) -> str:
    """``raw`` with every non-printable or non-ASCII character escaped, cut to ``limit``: what
    an event names when the host itself could not be canonicalised."""
    escaped = raw.encode("unicode_escape", "backslashreplace").decode("ascii")
    escaped = escaped.replace(" ", "\\x20")
    return escaped if len(escaped) <= limit else escaped[: limit - 3] + "..."


def canonical_host(raw: str) -> Host:
    """The canonical form of ``raw`` (see the module's docstring), or ``HostError``."""
    if not raw:
        raise HostError("invalid_host", "empty host")
    if len(raw) > _MAX_RAW:
        raise HostError("invalid_host", "host too long")
    if raw.startswith("[") and raw.endswith("]"):
        return Host(*_ipv6_literal(raw[1:-1]))
    if ":" in raw:
        return Host(*_ipv6_literal(raw))
    name = _ascii_name(raw) if raw.isascii() else _idna_name(raw)
    address = _ipv4_if_numeric(name)
    if address is not None:
        return Host(str(address), address)
    _check_labels(name)
    return Host(name)


def _ipv6_literal(text: str) -> tuple[str, IPAddress]:
    if "%" in text:
        # A zone id names an interface of this machine: never a destination a policy grants.
        raise HostError("ip_literal", "IPv6 literal with a zone id")
    if not text or not all(c in _HEX or c in ":." for c in text.lower()):
        raise HostError("invalid_host", "malformed IPv6 literal")
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise HostError("invalid_host", "malformed IPv6 literal") from None
    return str(address), address


def _ascii_name(raw: str) -> str:
    if any(c not in _ASCII_NAME_CHARS for c in raw):
        raise HostError("invalid_host", "host holds a character no host name has")
    name = raw.lower()
    return name[:-1] if name.endswith(".") else name


def _idna_name(raw: str) -> str:
    for c in raw:
        if c.isascii():
            if c not in _ASCII_NAME_CHARS:
                raise HostError("invalid_host", "host holds a character no host name has")
        elif unicodedata.category(c)[0] in "CZ":
            raise HostError("invalid_host", "host holds an invisible or control character")
    try:
        import idna
    except ImportError:
        raise HostError(
            "invalid_host", "a non-ASCII host needs the 'idna' package to be judged"
        ) from None
    try:
        encoded = idna.encode(raw, uts46=True, transitional=False)
    except (idna.IDNAError, UnicodeError, ValueError):
        raise HostError("invalid_host", "host is not a valid internationalised name") from None
    name = encoded.decode("ascii")
    if any(c not in _ASCII_NAME_CHARS for c in name):
        raise HostError("invalid_host", "host maps to a character no host name has")
    name = name.lower()
    return name[:-1] if name.endswith(".") else name


def _check_labels(name: str) -> None:
    if not name or len(name) > _MAX_NAME:
        raise HostError("invalid_host", "host name empty or longer than 253 characters")
    for label in name.split("."):
        if not label or len(label) > _MAX_LABEL:
            raise HostError("invalid_host", "host has an empty label or one over 63 characters")
        if any(c not in _LABEL_CHARS for c in label):  # pragma: no cover - checked above
            raise HostError("invalid_host", "host holds a character no host name has")


def _ipv4_if_numeric(name: str) -> ipaddress.IPv4Address | None:
    """The address of a name that ``inet_aton`` would read as one; ``None`` for a real name.
    A name ending in a numeric label that is no address is refused: no TLD is a number, and a
    resolver might read it as an address after all."""
    last = name.rsplit(".", 1)[-1]
    if not (last.isdigit() or (last.startswith("0x") and all(c in _HEX for c in last[2:]))):
        return None
    value = _inet_aton(name)
    if value is None:
        raise HostError("invalid_host", "numeric host that is no IPv4 address")
    return ipaddress.IPv4Address(value)


def _inet_aton(text: str) -> int | None:
    """``inet_aton``'s reading of ``text`` (1 to 4 parts, each decimal, ``0``-octal or
    ``0x``-hex; the last part fills the remaining bytes), or ``None``."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_aton_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    numbers = [v for v in values if v is not None]
    *head, last = numbers
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(numbers))):
        return None
    value = 0
    for v in head:
        value = (value << 8) | v
    return (value << (8 * (5 - len(numbers)))) | last


def _aton_part(part: str) -> int | None:
    if part.startswith("0x"):
        digits = part[2:]
        if not all(c in _HEX for c in digits):
            return None
        return int(digits, 16) if digits else 0  # "0x" alone is zero to glibc
    if part.startswith("0") and len(part) > 1:
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if not digits or not digits.isdigit() or not digits.isascii():
        return None
    try:
        return int(digits, base)
    except ValueError:  # an 8 or 9 in an octal part
        return None


_NAT64: Final = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
)
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")
_CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a public unicast address: not loopback, private (RFC 1918),
    link-local (cloud metadata included), CGNAT, unique-local, site-local, multicast,
    unspecified or reserved, also when an IPv4 address is carried inside an IPv6 one
    (IPv4-mapped, NAT64, 6to4)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return is_public(embedded)
        if address.is_site_local:
            return False
    elif address in _CGNAT:
        return False
    return address.is_global and not address.is_multicast and not address.is_reserved


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _SIX_TO_FOUR:
        return address.sixtofour
    if int(address) >> 32 == 0 and int(address) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(address))
    return None
