"""``NetworkPolicy`` and ``NetworkEvent`` (SPEC §22 *Network*)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv6Address
from typing import Final

import msgspec

from fastgate.sandbox._hosts import Host, HostError, IPAddress, canonical_host

#: Every ``NetworkEvent.reason``. ``allowed`` is the only one with ``allowed=True``.
REASONS: Final = (
    "allowed",
    "not_in_allow_list",
    "denied",
    "ip_literal",
    "invalid_host",
    "private_address",
    "resolve_failed",
    "connect_failed",
    "too_many_connections",
    "server_busy",
    "bad_request",
    "header_too_large",
    "header_timeout",
    "proxy_error",
)


class NetworkEvent(msgspec.Struct, frozen=True):
    """One decision of the proxy about one connection a program asked for.

    ``host``: the canonical host (an address in its canonical spelling for an IP literal); when
    the host could not be read at all, what was asked with every unprintable character escaped
    (``attacker.example\\x00.allowed.com``), or ``""`` when the request named none. ``port``: the
    port asked for (0 when unknown). ``reason``: ``"allowed"``, or why it was refused (one of
    ``REASONS``).
    """

    host: str
    port: int
    allowed: bool
    reason: str


@dataclass(frozen=True, slots=True)
class _Patterns:
    names: frozenset[str]
    suffixes: frozenset[str]  # from "*.x": "x", matched against every proper suffix of a host
    addresses: frozenset[IPAddress]

    @classmethod
    def parse(cls, patterns: Iterable[str], what: str) -> tuple[tuple[str, ...], _Patterns]:
        if isinstance(patterns, str | bytes):
            raise TypeError(f"{what}: expected a sequence of patterns, not one string")
        texts: list[str] = []
        names: set[str] = set()
        suffixes: set[str] = set()
        addresses: set[IPAddress] = set()
        bad: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise TypeError(f"{what}: patterns are strings, got {pattern!r}")
            try:
                host, wildcard = _parse_pattern(pattern)
            except HostError:
                bad.append(pattern)
                continue
            if wildcard:
                suffixes.add(host.text)
                texts.append("*." + host.text)
            elif host.address is not None:
                addresses.add(_unmapped(host.address))
                texts.append(host.text)
            else:
                names.add(host.text)
                texts.append(host.text)
        if bad:
            raise ValueError(
                f"{what}: not a host name, '*.domain' or IP address: "
                + ", ".join(repr(b) for b in bad)
            )
        return tuple(dict.fromkeys(texts)), cls(
            frozenset(names), frozenset(suffixes), frozenset(addresses)
        )

    def match(self, host: Host) -> bool:
        if host.address is not None:
            return _unmapped(host.address) in self.addresses
        if host.text in self.names:
            return True
        if not self.suffixes:
            return False
        text = host.text
        dot = text.find(".")
        while dot >= 0:
            if text[dot + 1 :] in self.suffixes:
                return True
            dot = text.find(".", dot + 1)
        return False


def _unmapped(address: IPAddress) -> IPAddress:
    # "::ffff:a.b.c.d" reaches the IPv4 host a.b.c.d: a pattern in either spelling must match
    # a request in either spelling, for deny as much as for allow.
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _parse_pattern(pattern: str) -> tuple[Host, bool]:
    wildcard = pattern.startswith("*.")
    host = canonical_host(pattern[2:] if wildcard else pattern)
    if wildcard and host.address is not None:
        raise HostError("invalid_host", "a wildcard over an address")
    return host, wildcard


@dataclass(frozen=True)
class NetworkPolicy:
    """Where a sandboxed program may connect, through fastgate's proxy.

    ``allow`` and ``deny``: host names (``pypi.org``), ``*.domain`` for any subdomain of
    ``domain`` (``*.github.com`` matches ``api.github.com`` and ``a.b.github.com``, not
    ``github.com`` itself: list both for both), or IP addresses (an IP literal a program asks
    for is refused unless its address is listed). Each is canonicalised as hosts are (case,
    IDNA, trailing dot), so ``allow`` holds the canonical texts; a malformed pattern raises
    ``ValueError`` naming it. ``deny`` wins over ``allow``; an empty ``allow`` allows nothing.

    ``allow_private``: whether a host may resolve to (or be) a loopback, private, link-local
    (cloud metadata included), CGNAT, unique-local, multicast or unspecified address.
    ``max_connections``: connections through the proxy open at once; beyond, refused.
    """

    allow: Iterable[str] = ()
    deny: Iterable[str] = ()
    allow_private: bool = False
    max_connections: int = 64
    _allow: _Patterns = field(init=False, repr=False, compare=False)
    _deny: _Patterns = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        allow_texts, allow = _Patterns.parse(self.allow, "allow")
        deny_texts, deny = _Patterns.parse(self.deny, "deny")
        if type(self.allow_private) is not bool:
            raise ValueError(f"allow_private: expected True or False, got {self.allow_private!r}")
        limit = self.max_connections
        if type(limit) is not int or limit < 1:
            raise ValueError(f"max_connections: expected an integer >= 1, got {limit!r}")
        set_ = object.__setattr__
        set_(self, "allow", allow_texts)
        set_(self, "deny", deny_texts)
        set_(self, "_allow", allow)
        set_(self, "_deny", deny)

    def judge(self, host: Host) -> str:
        """``"allowed"`` or the reason ``host`` is refused, before any resolution (the
        address check follows in the proxy)."""
        if self._deny.match(host):
            return "denied"
        if self._allow.match(host):
            return "allowed"
        return "ip_literal" if host.address is not None else "not_in_allow_list"
