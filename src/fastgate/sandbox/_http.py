"""The proxy's side of HTTP/1.1: reading a request head, answering a refusal.

Two requests are served: ``CONNECT host:port`` (a tunnel: after ``200`` the bytes go both ways
untouched) and an absolute-form request (``GET http://host[:port]/path``), which is sent on in
origin form with ``Host`` set from the URL (the URL is what was judged, so a different ``Host``
header cannot name another site on the same address) and ``Connection: close``: one request
per connection, its body framed by its ``Content-Length`` or chunked encoding, and nothing
after it (a next request on it would be judged by nobody). Anything else, and any head
that is not strict HTTP/1.1 (lines end in CRLF; no NUL, bare CR or LF, or other control
character; no obsolete folding), is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fastgate.sandbox._hosts import Host, HostError, canonical_host, printable

_TOKEN: Final = frozenset(
    b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
_VERSIONS: Final = (b"HTTP/1.1", b"HTTP/1.0")
_HOP_BY_HOP: Final = frozenset(
    (b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive", b"host")
)

STATUS: Final = {
    "not_in_allow_list": (403, "Forbidden"),
    "denied": (403, "Forbidden"),
    "ip_literal": (403, "Forbidden"),
    "invalid_host": (403, "Forbidden"),
    "private_address": (403, "Forbidden"),
    "bad_request": (400, "Bad Request"),
    "header_timeout": (408, "Request Timeout"),
    "header_too_large": (431, "Request Header Fields Too Large"),
    "too_many_connections": (503, "Service Unavailable"),
    "resolve_failed": (502, "Bad Gateway"),
    "connect_failed": (502, "Bad Gateway"),
    "proxy_error": (502, "Bad Gateway"),
    "proxy_authentication": (407, "Proxy Authentication Required"),
}

#: The response header naming why the proxy refused.
REFUSAL_HEADER: Final = "X-Fastgate-Refusal"
TUNNEL_OPEN: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"
CHUNKED: Final = -1  # the body length of a chunked request


class Refused(Exception):
    """The request is refused; ``host`` and ``port`` are what the event names."""

    def __init__(self, reason: str, host: str = "", port: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.host = host
        self.port = port


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """``head``: what to send upstream first (the rewritten head of a plain request; empty
    for a tunnel)."""

    tunnel: bool
    host: Host
    port: int
    head: bytes
    authorization: bytes | None = None  # the Proxy-Authorization header's value, if any
    body: int = 0  # a plain request's body length, or ``CHUNKED``


def refusal(reason: str) -> bytes:
    """The response for a refusal: the status its reason maps to, the reason in
    ``X-Fastgate-Refusal`` and in a one-line body."""
    status, phrase = STATUS[reason]
    body = f"fastgate network proxy refused: {reason}\n".encode("ascii")
    challenge = 'Proxy-Authenticate: Basic realm="fastgate"\r\n' if status == 407 else ""
    return (
        f"HTTP/1.1 {status} {phrase}\r\n{REFUSAL_HEADER}: {reason}\r\n{challenge}"
        f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii") + body


def parse_request(head: bytes) -> ProxyRequest:
    """The request of ``head`` (everything up to and including the blank line), or
    ``Refused``."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in _VERSIONS or not _is_token(parts[0]):
        raise Refused("bad_request")
    method, target_bytes, _version = parts
    headers = lines[1:]
    for line in headers:
        _check_header_line(line)
    target = target_bytes.decode("utf-8", "surrogateescape")
    authorization = _proxy_authorization(headers)
    if method == b"CONNECT":
        host, port = _authority(target, default_port=None)
        return ProxyRequest(True, host, port, b"", authorization)
    if not target[:7].lower() == "http://":
        raise Refused("bad_request")  # origin form (not a proxy request), or another scheme
    rest = target[7:]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    host, port = _authority(rest[:end], default_port=80)
    path = rest[end:].partition("#")[0]
    if any(c < 0x21 or c == 0x7F for c in path.encode("utf-8", "surrogateescape")):
        raise Refused("bad_request", host.text, port)
    origin = path if path.startswith("/") else "/" + path
    try:
        body = body_length(headers)
    except Refused:
        raise Refused("bad_request", host.text, port) from None
    head = _rewrite(method, origin, host, port, headers)
    return ProxyRequest(False, host, port, head, authorization, body)


def body_length(headers: list[bytes]) -> int:
    """The body's length (``0`` without one), or ``CHUNKED``; ``Refused`` when it cannot be
    framed unambiguously."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    for line in headers:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            lengths.append(value.strip())
        elif name == b"transfer-encoding":
            codings += [c.strip().lower() for c in value.split(b",")]
    if codings:
        if lengths or codings != [b"chunked"]:
            raise Refused("bad_request")
        return CHUNKED
    if not lengths:
        return 0
    if len(lengths) > 1 or not (1 <= len(lengths[0]) <= 18) or not lengths[0].isdigit():
        raise Refused("bad_request")
    return int(lengths[0])


def _proxy_authorization(headers: list[bytes]) -> bytes | None:
    for line in headers:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"proxy-authorization":
            return value.strip()
    return None


def _is_token(value: bytes) -> bool:
    return bool(value) and all(b in _TOKEN for b in value)


def _check_header_line(line: bytes) -> None:
    name, colon, value = line.partition(b":")
    if not colon or not _is_token(name):
        raise Refused("bad_request")  # no colon, a space before it, obsolete folding, ...
    if any((b < 0x20 and b != 0x09) or b == 0x7F for b in value):
        raise Refused("bad_request")


def _authority(text: str, *, default_port: int | None) -> tuple[Host, int]:
    """The host and port of ``host[:port]`` (``[v6][:port]``); ``Refused`` naming what it
    could read."""
    if text.startswith("["):
        close = text.find("]")
        raw_host, after = (text[: close + 1], text[close + 1 :]) if close > 0 else (text, "")
        if after and not after.startswith(":"):
            raise Refused("invalid_host", printable(text))
        port_text = after[1:] if after else None
    else:
        raw_host, colon, port_text_or_empty = text.rpartition(":")
        if not colon:
            raw_host, port_text = text, None
        else:
            port_text = port_text_or_empty
        if ":" in raw_host:  # an IPv6 literal outside brackets: which colon starts the port?
            raise Refused("invalid_host", printable(text))
    port = _port(port_text, default_port, raw_host)
    try:
        return canonical_host(raw_host), port
    except HostError as exc:
        raise Refused(exc.reason, printable(raw_host), port) from None


def _port(text: str | None, default: int | None, raw_host: str) -> int:
    if text is None:
        if default is None:
            raise Refused("bad_request", printable(raw_host))
        return default
    if not (1 <= len(text) <= 5 and text.isascii() and text.isdigit()) or not (
        1 <= int(text) <= 65535
    ):
        raise Refused("bad_request", printable(raw_host))
    return int(text)


def _rewrite(method: bytes, origin: str, host: Host, port: int, headers: list[bytes]) -> bytes:
    authority = f"[{host.text}]" if ":" in host.text else host.text
    if port != 80:
        authority = f"{authority}:{port}"
    out = [method + b" " + origin.encode("utf-8", "surrogateescape") + b" HTTP/1.1"]
    out.extend(
        line for line in headers if line.partition(b":")[0].strip().lower() not in _HOP_BY_HOP
    )
    out.append(b"Host: " + authority.encode("ascii"))
    out.append(b"Connection: close")
    return b"\r\n".join(out) + b"\r\n\r\n"
