"""``NetworkPolicy`` and host canonicalisation, without a proxy (SPEC §22 *Network*)."""

from __future__ import annotations

import dataclasses
import ipaddress
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate.sandbox import NETWORK_REASONS, NetworkEvent, NetworkPolicy
from fastgate.sandbox._hosts import Host, HostError, canonical_host, is_public


def judge(policy: NetworkPolicy, raw: str) -> str:
    try:
        return policy.judge(canonical_host(raw))
    except HostError as exc:
        return exc.reason


# -- canonicalisation ---------------------------------------------------------------------

SPELLINGS_OF_ONE_NAME = [
    "pypi.org",
    "PyPI.ORG",
    "pypi.org.",
    "PYPI.ORG.",
    "\uff50\uff59\uff50\uff49.org",  # fullwidth letters
    "pypi\u3002org",  # ideographic full stop
    "pypi\uff0eorg",  # fullwidth full stop
]


@pytest.mark.parametrize("raw", SPELLINGS_OF_ONE_NAME)
def test_every_spelling_of_a_name_is_one_canonical_name(raw: str) -> None:
    assert canonical_host(raw) == Host("pypi.org")


@pytest.mark.parametrize(
    "raw", ["bücher.example", "BÜCHER.example", "xn--bcher-kva.example", "XN--BCHER-KVA.EXAMPLE."]
)
def test_idna_names_are_encoded_once(raw: str) -> None:
    assert canonical_host(raw) == Host("xn--bcher-kva.example")


HOSTILE_HOSTS = [
    "",
    ".",
    "example..com",
    "attacker.example\x00.allowed.test",
    "allowed.test\x00",
    "attacker.example\t.allowed.test",
    "attacker.example\n.allowed.test",
    "attacker.example\r.allowed.test",
    "attacker.example\x7f.allowed.test",
    "attacker.example\x85.allowed.test",  # C1 control (NEL)
    "attacker.example .allowed.test",
    "attacker.example\u00a0.allowed.test",  # no-break space
    "attacker.example\u2028.allowed.test",  # line separator
    "attacker.example\u200b.allowed.test",  # zero-width space
    "allo\u00adwed.test",  # soft hyphen: a mapping would make it allowed.test
    "attacker.example\u202e.allowed.test",  # right-to-left override
    "attacker.example%00.allowed.test",
    "attacker.example%2e.allowed.test",
    "user@allowed.test",
    "attacker.example@allowed.test",
    "attacker.example/.allowed.test",
    "attacker.example\\.allowed.test",
    "attacker.example#.allowed.test",
    "attacker.example?.allowed.test",
    "attacker.example;.allowed.test",
    "a" * 64 + ".example",
    ("a" * 60 + ".") * 5 + "example",
    "x" * 5000,
    "[allowed.test]",
    "allowed.test]",
    "\udcff.allowed.test",  # a lone surrogate (an undecodable byte, escaped)
]


@pytest.mark.parametrize("raw", HOSTILE_HOSTS)
def test_hostile_hosts_are_refused_before_anything_else(raw: str) -> None:
    policy = NetworkPolicy(allow=("allowed.test", "*.allowed.test"))
    with pytest.raises(HostError) as info:
        canonical_host(raw)
    assert info.value.reason == "invalid_host"
    assert judge(policy, raw) == "invalid_host"


IPV4_LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "0x7f.1",
    "0x7F.0.0.1",
    "0x7f000001",
    "2130706433",
    "0177.0.0.1",
    "0177.1",
    "127.0.0.1.",
    "127\u30020\u30020\u30021",  # ideographic full stops, mapped by IDNA
]


@pytest.mark.parametrize("raw", IPV4_LOOPBACK_SPELLINGS)
def test_every_ipv4_spelling_is_read_as_the_address(raw: str) -> None:
    host = canonical_host(raw)
    assert host == Host("127.0.0.1", ipaddress.IPv4Address("127.0.0.1"))
    assert judge(NetworkPolicy(allow=("allowed.test",)), raw) == "ip_literal"
    assert judge(NetworkPolicy(allow=("127.0.0.1",)), raw) == "allowed"
    assert judge(NetworkPolicy(allow=("127.0.0.1",), deny=("127.1",)), raw) == "denied"


IPV6_SPELLINGS = [
    ("[::1]", "::1"),
    ("[0:0:0:0:0:0:0:1]", "::1"),
    ("[::FFFF:127.0.0.1]", "::ffff:7f00:1"),
    ("[::ffff:7f00:1]", "::ffff:7f00:1"),
    ("[2001:DB8::1]", "2001:db8::1"),
]


@pytest.mark.parametrize(("raw", "canonical"), IPV6_SPELLINGS)
def test_ipv6_literals_are_read_as_addresses(raw: str, canonical: str) -> None:
    host = canonical_host(raw)
    assert host.text == canonical and host.address == ipaddress.IPv6Address(canonical)
    assert judge(NetworkPolicy(allow=("allowed.test",)), raw) == "ip_literal"
    assert judge(NetworkPolicy(allow=(canonical,)), raw) == "allowed"


@pytest.mark.parametrize("raw", ["[fe80::1%eth0]", "[fe80::1%25eth0]", "fe80::1%1"])
def test_ipv6_zone_ids_are_never_allowed(raw: str) -> None:
    with pytest.raises(HostError) as info:
        canonical_host(raw)
    assert info.value.reason == "ip_literal"
    assert judge(NetworkPolicy(allow=("fe80::1",), allow_private=True), raw) == "ip_literal"


@pytest.mark.parametrize(
    "raw", ["1.2.3.4.5", "256.0.0.1", "1.2.3.256", "08.1.2.3", "4294967296", "0x1.0x1000000", "a.1"]
)
def test_a_name_ending_in_a_number_that_is_no_address_is_refused(raw: str) -> None:
    with pytest.raises(HostError) as info:
        canonical_host(raw)
    assert info.value.reason == "invalid_host"


@given(st.text(max_size=40))
def test_canonical_hosts_are_plain_ascii_and_stable(raw: str) -> None:
    try:
        host = canonical_host(raw)
    except HostError:
        return
    if host.address is None:
        assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789-_." for c in host.text)
        assert not host.text.endswith(".")
    assert canonical_host(host.text) == host
    assert not any(unicodedata.category(c)[0] in "CZ" for c in raw)


@given(st.sampled_from(["allowed.test", "api.allowed.test"]), st.text(min_size=1, max_size=3))
def test_a_control_or_separator_anywhere_is_refused(name: str, noise: str) -> None:
    bad = [c for c in noise if unicodedata.category(c)[0] in "CZ"]
    if not bad:
        return
    for position in (0, 3, len(name)):
        with pytest.raises(HostError):
            canonical_host(name[:position] + noise + name[position:])


# -- the policy -----------------------------------------------------------------------------


def test_a_wildcard_matches_subdomains_only() -> None:
    policy = NetworkPolicy(allow=("*.example.test",))
    assert judge(policy, "api.example.test") == "allowed"
    assert judge(policy, "a.b.example.test") == "allowed"
    assert judge(policy, "API.Example.Test.") == "allowed"
    assert judge(policy, "example.test") == "not_in_allow_list"
    assert judge(policy, "badexample.test") == "not_in_allow_list"
    assert judge(policy, "example.test.attacker.example") == "not_in_allow_list"
    assert judge(policy, "api.example.test.attacker.example") == "not_in_allow_list"


def test_deny_wins_over_allow() -> None:
    policy = NetworkPolicy(
        allow=("*.example.test", "example.test", "203.0.113.7"),
        deny=("secret.example.test", "*.internal.example.test", "203.0.113.7"),
    )
    assert judge(policy, "api.example.test") == "allowed"
    assert judge(policy, "example.test") == "allowed"
    assert judge(policy, "SECRET.example.test.") == "denied"
    assert judge(policy, "db.internal.example.test") == "denied"
    assert judge(policy, "internal.example.test") == "allowed"
    assert judge(policy, "203.0.113.7") == "denied"


def test_an_empty_allow_list_allows_nothing() -> None:
    assert judge(NetworkPolicy(), "pypi.org") == "not_in_allow_list"


def test_patterns_are_kept_canonical() -> None:
    policy = NetworkPolicy(
        allow=("PyPI.org.", "*.GitHubUserContent.com", "bücher.example", "0x7f.1", "[::1]"),
        deny=("Evil.Example",),
    )
    assert policy.allow == (
        "pypi.org",
        "*.githubusercontent.com",
        "xn--bcher-kva.example",
        "127.0.0.1",
        "::1",
    )
    assert policy.deny == ("evil.example",)
    assert NetworkPolicy(allow=policy.allow, deny=policy.deny) == policy


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "*",
        "*.",
        "**.example.com",
        "a.*.example.com",
        "*example.com",
        "example.*",
        "*.127.0.0.1",
        "exa mple.com",
        "example.com\x00",
        "example.com/path",
        "user@example.com",
        "example.com:443",
        "10.0.0.0/8",
        "fe80::1%eth0",
        "1.2.3.4.5",
    ],
)
def test_a_bad_pattern_is_named_in_a_value_error(pattern: str) -> None:
    with pytest.raises(ValueError, match="allow") as info:
        NetworkPolicy(allow=("good.example", pattern))
    assert repr(pattern) in str(info.value)
    with pytest.raises(ValueError, match="deny"):
        NetworkPolicy(deny=(pattern,))


def test_every_bad_pattern_is_named_at_once() -> None:
    with pytest.raises(ValueError) as info:
        NetworkPolicy(allow=("a b", "ok.example", "*x"))
    assert "'a b'" in str(info.value) and "'*x'" in str(info.value)


def test_the_policy_refuses_wrong_types() -> None:
    with pytest.raises(TypeError):
        NetworkPolicy(allow="pypi.org")
    with pytest.raises(TypeError):
        NetworkPolicy(allow=(b"pypi.org",))  # type: ignore[arg-type]
    for limit in (0, -1, True, 1.5, "64"):
        with pytest.raises(ValueError, match="max_connections"):
            NetworkPolicy(max_connections=limit)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_private"):
        NetworkPolicy(allow_private=1)  # type: ignore[arg-type]


def test_the_policy_is_frozen() -> None:
    policy = NetworkPolicy(allow=("pypi.org",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.allow = ("evil.example",)  # type: ignore[misc]
    event = NetworkEvent("pypi.org", 443, True, "allowed")
    with pytest.raises(AttributeError):
        event.allowed = False  # type: ignore[misc]


def test_reasons_are_listed() -> None:
    assert NETWORK_REASONS[0] == "allowed"
    assert len(set(NETWORK_REASONS)) == len(NETWORK_REASONS)


# -- addresses --------------------------------------------------------------------------------

NOT_PUBLIC = [
    "127.0.0.1",
    "127.255.0.9",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",  # cloud metadata
    "169.254.0.1",
    "100.64.0.1",  # CGNAT
    "100.100.100.200",  # a cloud's metadata, inside CGNAT
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "::1",
    "::",
    "fc00::1",
    "fd00:ec2::254",  # cloud metadata over IPv6
    "fe80::1",
    "fec0::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "::127.0.0.1",  # IPv4-compatible
]
PUBLIC = ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("text", NOT_PUBLIC)
def test_private_and_special_addresses_are_not_public(text: str) -> None:
    assert not is_public(ipaddress.ip_address(text))


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses_are_public(text: str) -> None:
    assert is_public(ipaddress.ip_address(text))
