"""``MCPServerConfig`` and ``load_mcp_config`` (SPEC §14).

A configuration is checked whole when it is made: a bad field raises ``MCPConfigError`` naming
the server and the field, and nothing of a file with one bad entry is used (never half-applied).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import msgspec

# ``mcp__<server>`` must stay a valid rule name and keep its ``__`` separator unambiguous, so
# a server name is letters, digits and ``-`` joined by single underscores, at most 40 long
# (a mangled tool name keeps the whole ``mcp__<server>__`` prefix).
SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")
MAX_SERVER_NAME = 40
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_EMPTY: Mapping[str, str] = MappingProxyType({})


class MCPConfigError(ValueError):
    """A server's configuration is wrong. ``server`` and ``field`` say where."""

    def __init__(self, server: str, field: str, problem: str, *, source: str | None = None):
        where = f"{source}: " if source else ""
        super().__init__(f"{where}MCP server {server!r}: {field}: {problem}")
        self.server = server
        self.field = field
        self.problem = problem
        self.source = source


@dataclasses.dataclass(frozen=True)
class MCPServerConfig:
    """One MCP server: ``command`` (argv, stdio) or ``url`` (streamable HTTP), never both.

    Times are seconds: ``startup_timeout`` bounds connecting and the first listing,
    ``call_timeout`` caps a whole call, ``idle_timeout`` ends a call that has been silent
    (no progress notification) that long. ``max_concurrency`` is the number of calls to this
    server admitted at once, across every session. ``trust_annotations`` lets the server's
    ``readOnlyHint`` make a tool read-only; ``required`` makes a server that cannot start fail
    ``MCPBridge.__aenter__`` instead of being retried in the background.
    """

    name: str
    command: Sequence[str] | None = None
    url: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=lambda: _EMPTY)
    cwd: str | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=lambda: _EMPTY)
    scope: str | None = None
    startup_timeout: float = 30.0
    call_timeout: float = 300.0
    idle_timeout: float = 60.0
    max_concurrency: int = 4
    trust_annotations: bool = False
    required: bool = False

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name:
            raise MCPConfigError(str(name), "name", "must be a non-empty string")
        if len(name) > MAX_SERVER_NAME or not SERVER_NAME.fullmatch(name):
            raise MCPConfigError(
                name,
                "name",
                f"use at most {MAX_SERVER_NAME} letters, digits and '-', joined by single '_' "
                "(tool names become mcp__<server>__<tool>)",
            )
        set_ = object.__setattr__
        if (self.command is None) == (self.url is None):
            raise MCPConfigError(name, "command", "give either command (stdio) or url (http)")
        if self.command is not None:
            command = self.command
            if isinstance(command, str) or not isinstance(command, (list, tuple)):
                raise MCPConfigError(name, "command", "must be a list: the program, then its args")
            if not command or not all(isinstance(a, str) and "\x00" not in a for a in command):
                raise MCPConfigError(name, "command", "must be a non-empty list of strings")
            if not command[0]:
                raise MCPConfigError(name, "command", "the program is an empty string")
            set_(self, "command", tuple(command))
        if self.url is not None:
            url = self.url
            if not isinstance(url, str) or not re.match(r"https?://[^/\s]+", url):
                raise MCPConfigError(name, "url", f"{url!r} is not an http:// or https:// URL")
        set_(self, "env", _strings(name, "env", self.env))
        set_(self, "headers", _strings(name, "headers", self.headers))
        if self.headers and self.url is None:
            raise MCPConfigError(name, "headers", "only an http server takes headers")
        if self.cwd is not None and (not isinstance(self.cwd, str) or not self.cwd):
            raise MCPConfigError(name, "cwd", "must be a directory path")
        if self.cwd is not None and self.command is None:
            raise MCPConfigError(name, "cwd", "only a stdio server (command) takes a cwd")
        if self.scope is not None and (not isinstance(self.scope, str) or not self.scope):
            raise MCPConfigError(name, "scope", "must be a registry scope name or None")
        for field in ("startup_timeout", "call_timeout", "idle_timeout"):
            value = getattr(self, field)
            if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
                raise MCPConfigError(
                    name, field, f"must be a positive number of seconds, got {value!r}"
                )
            set_(self, field, float(value))
        if type(self.max_concurrency) is not int or self.max_concurrency < 1:
            raise MCPConfigError(
                name, "max_concurrency", f"must be an integer >= 1, got {self.max_concurrency!r}"
            )
        for field in ("trust_annotations", "required"):
            if type(getattr(self, field)) is not bool:
                raise MCPConfigError(name, field, "must be true or false")

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


def _strings(server: str, field: str, value: object) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise MCPConfigError(server, field, "must be an object of strings")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise MCPConfigError(server, field, f"{key!r}: names and values must be strings")
    return MappingProxyType(dict(value))


# -- files ------------------------------------------------------------------------------------

# Fields of an entry, as MCP clients write them, plus fastgate's own (snake_case).
_STDIO_KEYS = frozenset({"type", "command", "args", "env", "cwd"})
_HTTP_KEYS = frozenset({"type", "url", "headers"})
_OWN_KEYS = frozenset(
    {
        "scope",
        "startup_timeout",
        "call_timeout",
        "idle_timeout",
        "max_concurrency",
        "trust_annotations",
        "required",
        "disabled",
    }
)
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamableHttp"})


def load_mcp_config(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> list[MCPServerConfig]:
    """The servers of an ``{"mcpServers": {name: {...}}}`` file, in file order.

    Stdio entries are ``{"command", "args", "env", "cwd"}``; http entries ``{"type": "http",
    "url", "headers"}``. ``${VAR}`` and ``${VAR:-default}`` in strings are taken from the
    environment; a relative ``cwd`` is relative to the file's directory; ``"disabled": true``
    skips an entry. Every fault raises ``MCPConfigError`` (a ``ValueError``) naming the file,
    the server and the field; a file with one bad entry yields nothing.
    """
    source = os.fspath(path)
    env = os.environ if environ is None else environ
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise MCPConfigError("*", "file", f"cannot be read: {exc}", source=source) from None
    try:
        document = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise MCPConfigError("*", "file", f"is not valid JSON: {exc}", source=source) from None
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise MCPConfigError(
            "*", "mcpServers", "the file needs an object 'mcpServers'", source=source
        )
    base = os.path.dirname(os.path.abspath(source))
    configs: list[MCPServerConfig] = []
    for name, entry in document["mcpServers"].items():
        try:
            config = _entry(name, entry, base, env)
        except MCPConfigError as exc:
            raise MCPConfigError(exc.server, exc.field, exc.problem, source=source) from None
        if config is not None:
            configs.append(config)
    return configs


def _entry(name: str, entry: object, base: str, env: Mapping[str, str]) -> MCPServerConfig | None:
    if not isinstance(entry, dict):
        raise MCPConfigError(name, "entry", "must be an object")
    kind = entry.get("type", "stdio" if "command" in entry else None)
    if kind == "stdio":
        allowed = _STDIO_KEYS
    elif kind in _HTTP_TYPES:
        allowed = _HTTP_KEYS
    elif kind is None:
        raise MCPConfigError(name, "type", "give a command (stdio) or type 'http' with a url")
    else:
        raise MCPConfigError(name, "type", f"{kind!r} is not supported (use 'stdio' or 'http')")
    unknown = sorted(set(entry) - allowed - _OWN_KEYS)
    if unknown:
        raise MCPConfigError(name, unknown[0], f"unknown field for a {kind} server")
    disabled = entry.get("disabled", False)
    if type(disabled) is not bool:
        raise MCPConfigError(name, "disabled", "must be true or false")
    options = {k: entry[k] for k in _OWN_KEYS - {"disabled"} if k in entry}
    if kind == "stdio":
        command = entry.get("command")
        args = entry.get("args", [])
        if not isinstance(command, str) or not command:
            raise MCPConfigError(name, "command", "must be the program to run, a string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise MCPConfigError(name, "args", "must be a list of strings")
        argv = [_expand(name, "command", command, env)]
        argv += [_expand(name, f"args[{i}]", a, env) for i, a in enumerate(args)]
        cwd = entry.get("cwd")
        if cwd is not None:
            if not isinstance(cwd, str):
                raise MCPConfigError(name, "cwd", "must be a directory path")
            cwd = os.path.join(base, os.path.expanduser(_expand(name, "cwd", cwd, env)))
        config = MCPServerConfig(
            name,
            command=tuple(argv),
            env=_expanded_map(name, "env", entry.get("env", {}), env),
            cwd=cwd,
            **options,
        )
    else:
        url = entry.get("url")
        if not isinstance(url, str):
            raise MCPConfigError(name, "url", "an http server needs a url string")
        config = MCPServerConfig(
            name,
            url=_expand(name, "url", url, env),
            headers=_expanded_map(name, "headers", entry.get("headers", {}), env),
            **options,
        )
    return None if disabled else config


def _expanded_map(server: str, field: str, value: object, env: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise MCPConfigError(server, field, "must be an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise MCPConfigError(server, f"{field}.{key}", "must be a string")
        out[key] = _expand(server, f"{field}.{key}", item, env)
    return out


def _expand(server: str, field: str, text: str, env: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        value = env.get(match.group(1))
        if value is not None:
            return value
        if match.group(2) is not None:
            return match.group(2)
        raise MCPConfigError(
            server,
            field,
            f"${{{match.group(1)}}} is not set (write ${{{match.group(1)}:-default}})",
        )

    return _ENV_REFERENCE.sub(substitute, text)
