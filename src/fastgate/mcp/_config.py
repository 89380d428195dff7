"""``MCPServerConfig`` and ``load_mcp_config`` (SPEC §14).

A configuration is checked whole when it is made: a bad field raises ``MCPConfigError`` naming
the server and the field, and nothing of a file with one bad entry is used (never half-applied).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import msgspec

from fastgate.errors import FastgateConfigWarning
from fastgate.mcp._names import tool_name

if TYPE_CHECKING:
    from fastgate.mcp._auth import OAuthClient

# ``mcp__<server>`` must stay a valid rule name and keep its ``__`` separator unambiguous, so
# a server name is letters, digits and ``-`` joined by single underscores, at most 40 long
# (a mangled tool name keeps the whole ``mcp__<server>__`` prefix).
SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")
MAX_SERVER_NAME = 40
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_EMPTY: Mapping[str, str] = MappingProxyType({})
TRANSPORTS = ("stdio", "http", "sse", "auto")


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
    """One MCP server: ``command`` (argv, stdio) or ``url`` (HTTP), never both.

    ``transport`` says how a ``url`` is spoken: ``"http"`` (streamable HTTP, the default),
    ``"sse"`` (the older HTTP+SSE transport) or ``"auto"`` (streamable HTTP, falling back to
    SSE when the server answers the first POST with a 4xx status, as MCP clients that infer
    the transport do). Left ``None`` it is ``"stdio"`` for a command and ``"http"`` for a url.

    Times are seconds: ``startup_timeout`` bounds connecting and the first listing,
    ``call_timeout`` caps a whole call, ``idle_timeout`` ends a call that has been silent
    (no progress notification) that long. ``max_concurrency`` is the number of calls to this
    server admitted at once, across every session. ``trust_annotations`` lets the server's
    ``readOnlyHint`` make a tool read-only; ``required`` makes a server that cannot start fail
    ``MCPBridge.__aenter__`` instead of being retried in the background. ``auth`` (an
    ``OAuthClient``) signs in to an http server behind OAuth 2.1.
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
    transport: str | None = None
    auth: OAuthClient | None = None

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
        set_(self, "transport", self._checked_transport())
        self._check_auth()

    def _check_auth(self) -> None:
        """OAuth is for an http server, instead of a static Authorization header, and sends
        tokens in clear only to this machine."""
        if self.auth is None:
            return
        from fastgate.mcp._auth import OAuthClient, is_loopback

        if not isinstance(self.auth, OAuthClient):
            raise MCPConfigError(self.name, "auth", "must be an OAuthClient or None")
        if self.url is None:
            raise MCPConfigError(self.name, "auth", "only an http server (url) takes auth")
        if any(key.lower() == "authorization" for key in self.headers):
            raise MCPConfigError(
                self.name, "auth", "give either auth or an Authorization header, not both"
            )
        if self.url.startswith("http://") and not is_loopback(self.url):
            raise MCPConfigError(
                self.name, "auth", "OAuth tokens are sent over https only (http: loopback only)"
            )

    def _checked_transport(self) -> str:
        transport = self.transport
        if transport is None:
            return "stdio" if self.command is not None else "http"
        if transport not in TRANSPORTS:
            raise MCPConfigError(
                self.name, "transport", f"{transport!r} is not one of {', '.join(TRANSPORTS)}"
            )
        if (transport == "stdio") != (self.command is not None):
            needs = "a command" if transport == "stdio" else "a url"
            raise MCPConfigError(self.name, "transport", f"{transport!r} needs {needs}")
        return transport


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
_URL_KEYS = frozenset({"type", "url", "headers"})
_OWN_KEYS = frozenset(
    {
        "scope",
        "startup_timeout",
        "call_timeout",
        "idle_timeout",
        "max_concurrency",
        "trust_annotations",
        "required",
    }
)
# What each client writes in "type" (Claude Code and VS Code "http", Cline "streamableHttp",
# Roo Code "streamable-http"), and Cline's older "transportType".
_TYPES = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamableHttp": "http",
    "streamable_http": "http",
    "sse": "sse",
}
_TYPE_KEYS = ("type", "transportType")
_HONOURED_KEYS = frozenset({*_TYPE_KEYS, "disabled", "timeout"})
# Fields other clients add that fastgate reads but does not act on, and what to do instead.
_FOREIGN = {
    "description": "a description is not used by fastgate",
    "disabledTools": (
        "fastgate registers every tool of the server; deny the ones you do not want with a rule "
        "(mcp__<server>__<tool>)"
    ),
    "envFile": "fastgate does not read env files; put the variables in env",
    "watchPaths": "fastgate does not restart a server when files change",
    "oauth": (
        "give the server MCPServerConfig(auth=OAuthClient(...)) in code instead (a config file "
        "is no place for a client secret)"
    ),
}
_APPROVAL_KEYS = ("alwaysAllow", "autoApprove")
# Directories whose config file's ${workspaceFolder} is their parent (VS Code, Cursor, Claude).
_CLIENT_DIRS = frozenset({".vscode", ".cursor", ".claude"})
# ${NAME}, ${NAME:-default}, ${env:NAME}, ${workspaceFolder}, ${input:id}, ...
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROMPTED = frozenset({"input", "command", "config"})  # VS Code asks or computes these itself
# JSON with comments and trailing commas (VS Code's mcp.json): strings are kept whole.
_JSONC_COMMENT = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*[\s\S]*?\*/')
_JSONC_TRAILING_COMMA = re.compile(r'"(?:[^"\\]|\\.)*"|,(?=\s*[}\]])')


class MCPConfigFile(list[MCPServerConfig]):
    """The servers of one config file, in file order (a list), with what the file holds that
    fastgate read but did not act on: ``warnings()``. Each warning names the file, the server
    and the field; each was also issued as a ``FastgateConfigWarning``."""

    def __init__(self, servers: Sequence[MCPServerConfig], source: str, notes: Sequence[str]):
        super().__init__(servers)
        self.source = source
        self._notes = tuple(notes)

    def warnings(self) -> list[str]:
        return list(self._notes)


class _Skipped(Exception):
    """The entry is left out (a field says so, or it needs what fastgate cannot give it)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


@dataclasses.dataclass
class _Place:
    """Where an entry comes from: for relative paths, ``${workspaceFolder}`` and warnings."""

    source: str
    base: str  # the file's directory
    workspace: str
    env: Mapping[str, str]
    notes: list[str]

    def note(self, server: str, field: str, problem: str) -> None:
        self.notes.append(f"{self.source}: MCP server {server!r}: {field}: {problem}")


def load_mcp_config(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> MCPConfigFile:
    """The servers of an MCP client's config file, in file order.

    Reads ``{"mcpServers": {name: {...}}}`` (Claude Code, Claude Desktop, Cursor, Cline) and
    VS Code's ``{"servers": {...}}`` (also under ``"mcp"`` in its settings), comments and
    trailing commas allowed. Stdio entries are ``{"command", "args", "env", "cwd"}``; url
    entries ``{"type": "http" | "sse", "url", "headers"}`` (no type: streamable HTTP, falling
    back to SSE). ``${VAR}``, ``${VAR:-default}`` and ``${env:VAR}`` come from the environment,
    ``${workspaceFolder}`` and ``${userHome}`` are VS Code's; a relative ``cwd`` is relative to
    the file's directory. ``"disabled": true`` skips an entry, Cline's ``"timeout"`` (seconds)
    is the ``call_timeout``.

    What fastgate reads but does not act on (another client's field, an unsupported transport,
    a variable VS Code would prompt for, a name fastgate cannot use) is a
    ``FastgateConfigWarning`` naming the file, the server and the field, issued with
    ``warnings.warn`` and listed by the result's ``warnings()``; such an entry is skipped or the
    field ignored, never a reason to refuse the file. A fault in what fastgate does use raises
    ``MCPConfigError`` (a ``ValueError``) naming the file, the server and the field; a file with
    one bad entry yields nothing.
    """
    source = os.fspath(path)
    document = _read_document(source)
    base = os.path.dirname(os.path.abspath(source))
    workspace = os.path.dirname(base) if os.path.basename(base) in _CLIENT_DIRS else base
    place = _Place(source, base, workspace, os.environ if environ is None else environ, [])
    entries = _server_entries(document, place)
    configs: list[MCPServerConfig] = []
    for name, entry in entries.items():
        try:
            config = _entry(name, entry, place)
        except _Skipped as skip:
            place.note(name, skip.field, skip.problem + "; the server is skipped")
            continue
        except MCPConfigError as exc:
            raise MCPConfigError(exc.server, exc.field, exc.problem, source=source) from None
        if config is not None:
            configs.append(config)
    for note in place.notes:
        warnings.warn(note, FastgateConfigWarning, stacklevel=2)
    return MCPConfigFile(configs, source, place.notes)


def _read_document(source: str) -> object:
    try:
        with open(source, "rb") as f:
            raw = f.read().removeprefix(b"\xef\xbb\xbf")
    except OSError as exc:
        raise MCPConfigError("*", "file", f"cannot be read: {exc}", source=source) from None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nested too deeply
        error = exc
    try:  # VS Code's files may hold comments and trailing commas
        return msgspec.json.decode(_without_comments(raw.decode("utf-8")))
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise MCPConfigError("*", "file", f"is not valid JSON: {error}", source=source) from None


def _without_comments(text: str) -> str:
    def keep_strings(replacement: str) -> Callable[[re.Match[str]], str]:
        return lambda m: m.group() if m.group().startswith('"') else replacement

    text = _JSONC_COMMENT.sub(keep_strings(" "), text)
    return _JSONC_TRAILING_COMMA.sub(keep_strings(""), text)


def _server_entries(document: object, place: _Place) -> dict[str, object]:
    """The servers object: ``mcpServers``, or VS Code's ``servers`` (also inside the ``mcp``
    key of its settings)."""
    if isinstance(document, dict):
        nested = document.get("mcp")
        for holder in (document, nested if isinstance(nested, dict) else {}):
            for key in ("mcpServers", "servers"):
                entries = holder.get(key)
                if isinstance(entries, dict):
                    if key == "mcpServers" and isinstance(holder.get("servers"), dict):
                        place.note("*", "servers", "ignored: the file also has mcpServers")
                    return entries
    raise MCPConfigError(
        "*",
        "mcpServers",
        "the file needs an object 'mcpServers' (or VS Code's 'servers')",
        source=place.source,
    )


def _entry(name: str, entry: object, place: _Place) -> MCPServerConfig | None:
    if not isinstance(entry, dict):
        raise MCPConfigError(name, "entry", "must be an object")
    if _disabled(name, entry, place):
        return None
    if not isinstance(name, str) or len(name) > MAX_SERVER_NAME or not SERVER_NAME.fullmatch(name):
        raise _Skipped(
            "name",
            f"fastgate needs at most {MAX_SERVER_NAME} letters, digits and '-', joined by single "
            "'_' (tool names become mcp__<server>__<tool>): rename the entry",
        )
    kind = _kind(name, entry)
    allowed = _STDIO_KEYS if kind == "stdio" else _URL_KEYS
    for field in entry:
        if field not in allowed and field not in _OWN_KEYS and field not in _HONOURED_KEYS:
            _foreign(name, field, entry[field], place)
    options: dict[str, Any] = {k: entry[k] for k in _OWN_KEYS if k in entry}
    timeout = _cline_timeout(name, entry, place)
    if timeout is not None:
        options["call_timeout"] = timeout
    if kind == "stdio":
        return _stdio_entry(name, entry, place, options)
    url = entry.get("url")
    if not isinstance(url, str):
        raise MCPConfigError(name, "url", "an http or sse server needs a url string")
    return MCPServerConfig(
        name,
        url=_expand(name, "url", url, place),
        headers=_expanded_map(name, "headers", entry.get("headers", {}), place),
        transport=kind,
        **options,
    )


def _disabled(name: str, entry: dict[str, Any], place: _Place) -> bool:
    disabled = entry.get("disabled")
    if disabled is None or disabled is False:
        return False
    if disabled is not True:
        # Not clearly enabled: a server the user may have meant to switch off is not started.
        place.note(name, "disabled", f"{disabled!r} is not true or false; the server is skipped")
    return True


def _kind(name: str, entry: dict[str, Any]) -> str:
    """The entry's transport: its type (or Cline's older transportType); without one, stdio
    for a command and ``auto`` for a url (Cursor and Cline infer it)."""
    declared = next((entry[k] for k in _TYPE_KEYS if k in entry), None)
    if declared is None:
        if "command" in entry:
            return "stdio"
        if "url" in entry:
            return "auto"
        raise MCPConfigError(name, "type", "give a command (stdio) or a url (http, sse)")
    if not isinstance(declared, str):
        raise MCPConfigError(name, "type", f"must be a string, got {declared!r}")
    kind = _TYPES.get(declared)
    if kind is None:
        raise _Skipped("type", f"the transport {declared!r} is not supported (stdio, http, sse)")
    return kind


def _foreign(name: str, field: str, value: object, place: _Place) -> None:
    """A field fastgate does not act on: warned about, ignored."""
    if field in _APPROVAL_KEYS:
        tools = value if isinstance(value, list) else []
        rules = ", ".join(tool_name(name, str(t)) for t in tools[:5]) or f"mcp__{name}__<tool>"
        problem = (
            "ignored: approvals are never loosened by an MCP config; to allow tools without a "
            f"prompt, write allow rules in your settings ({rules})"
        )
    elif field in _FOREIGN:
        problem = "ignored: " + _FOREIGN[field]
    elif field in _STDIO_KEYS:
        problem = "ignored: only a stdio server (command) takes it"
    elif field in _URL_KEYS:
        problem = "ignored: only an http or sse server (url) takes it"
    else:
        problem = "ignored: not a field fastgate knows"
    place.note(name, field, problem)


def _cline_timeout(name: str, entry: dict[str, Any], place: _Place) -> float | None:
    """Cline's ``timeout`` (seconds per call) as the ``call_timeout``, unless that is given."""
    if "timeout" not in entry:
        return None
    value = entry["timeout"]
    if "call_timeout" in entry:
        place.note(name, "timeout", "ignored: call_timeout is given")
    elif type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        place.note(name, "timeout", f"ignored: {value!r} is not a positive number of seconds")
    else:
        return float(value)
    return None


def _stdio_entry(
    name: str, entry: dict[str, Any], place: _Place, options: dict[str, Any]
) -> MCPServerConfig:
    command = entry.get("command")
    args = entry.get("args", [])
    if not isinstance(command, str) or not command:
        raise MCPConfigError(name, "command", "must be the program to run, a string")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise MCPConfigError(name, "args", "must be a list of strings")
    argv = [_expand(name, "command", command, place)]
    argv += [_expand(name, f"args[{i}]", a, place) for i, a in enumerate(args)]
    cwd = entry.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str):
            raise MCPConfigError(name, "cwd", "must be a directory path")
        cwd = os.path.join(place.base, os.path.expanduser(_expand(name, "cwd", cwd, place)))
    return MCPServerConfig(
        name,
        command=tuple(argv),
        env=_expanded_map(name, "env", entry.get("env", {}), place),
        cwd=cwd,
        **options,
    )


def _expanded_map(server: str, field: str, value: object, place: _Place) -> dict[str, str]:
    if not isinstance(value, dict):
        raise MCPConfigError(server, field, "must be an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise MCPConfigError(server, f"{field}.{key}", "must be a string")
        out[key] = _expand(server, f"{field}.{key}", item, place)
    return out


def _expand(server: str, field: str, text: str, place: _Place) -> str:
    def substitute(match: re.Match[str]) -> str:
        name, rest = match.group(1), match.group(2)
        if rest is None:
            known = _predefined(name, place)
            if known is not None:
                return known
        elif name in _PROMPTED:
            raise _Skipped(
                field,
                f"{match.group()} is a value VS Code asks for or computes; fastgate cannot "
                "(write ${VAR} and set the environment variable)",
            )
        elif name == "env" and _IDENTIFIER.fullmatch(rest):
            name, rest = rest, None
        elif not rest.startswith("-"):
            return match.group()  # not a reference any client defines: kept as written
        value = place.env.get(name)
        if value is not None:
            return value
        if rest is not None:
            return rest[1:]
        raise MCPConfigError(server, field, f"${{{name}}} is not set (write ${{{name}:-default}})")

    return _REFERENCE.sub(substitute, text)


def _predefined(name: str, place: _Place) -> str | None:
    """VS Code's and Cursor's predefined variables."""
    if name == "workspaceFolder":
        return place.workspace
    if name == "workspaceFolderBasename":
        return os.path.basename(place.workspace)
    if name == "userHome":
        return os.path.expanduser("~")
    if name == "pathSeparator":
        return os.sep
    return None
