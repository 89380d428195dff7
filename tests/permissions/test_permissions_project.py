"""Project approvals: rules appended atomically to ``.fastgate/settings.local.json``."""

from __future__ import annotations

import json
import os
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate import (
    ApprovalStore,
    AuditEvent,
    AuditSink,
    Decision,
    DecisionSource,
    PermissionConfig,
    PermissionMode,
    PermissionResolver,
    ToolKind,
    define_tool,
)
from fastgate.model.context import ExecutionContext
from fastgate.permissions import settings as settings_module
from fastgate.permissions import settings_path

BASH = define_tool(
    "Bash",
    "b",
    {"type": "object", "properties": {"command": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.EXECUTE,
)
WRITE = define_tool(
    "Write",
    "w",
    {"type": "object", "properties": {"file_path": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.WRITE,
)


def new_resolver(**config: Any) -> PermissionResolver:
    return PermissionResolver(PermissionConfig(**config), PermissionMode.DEFAULT, ApprovalStore())


def context(root: Path) -> ExecutionContext:
    return ExecutionContext(session_id="s", workspace_root=str(root))


def read_settings(root: Path) -> Any:
    return json.loads(Path(settings_path(str(root))).read_text())


def test_project_approval_is_honoured_by_a_new_resolver(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    args = {"command": "make  check"}
    first = new_resolver()
    assert first.decide(BASH, args, ctx).decision is Decision.ASK
    written = first.record_project_approval(BASH, args, ctx)
    assert written == "Bash(make check)"
    assert read_settings(tmp_path) == {"permissions": {"allow": ["Bash(make check)"]}}
    for resolver in (first, new_resolver()):
        result = resolver.decide(BASH, args, ctx)
        assert result.decision is Decision.ALLOW
        assert result.source is DecisionSource.RULE
    # exact rules: nothing more rides on them
    assert new_resolver().decide(BASH, {"command": "make check; whoami"}, ctx).decision is (
        Decision.ASK
    )


def test_project_approval_of_paths_uses_canonical_paths(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "star*").mkdir()
    ctx = context(tmp_path)
    written = new_resolver().record_project_approval(WRITE, {"file_path": "d/../star*/f"}, ctx)
    assert written == f"Write(/{os.path.realpath(tmp_path)}/star\\*/f)"
    resolver = new_resolver()
    assert resolver.decide(WRITE, {"file_path": "star*/f"}, ctx).decision is Decision.ALLOW
    assert resolver.decide(WRITE, {"file_path": "star*/g"}, ctx).decision is Decision.ASK
    (tmp_path / "starX").mkdir()
    assert resolver.decide(WRITE, {"file_path": "starX/f"}, ctx).decision is Decision.ASK


def test_existing_content_is_preserved(tmp_path: Path) -> None:
    path = Path(settings_path(str(tmp_path)))
    path.parent.mkdir()
    path.write_text(
        json.dumps(
            {"theme": "dark", "permissions": {"deny": ["Bash(rm:*)"], "allow": ["Bash(ls)"]}}
        )
    )
    ctx = context(tmp_path)
    new_resolver().record_project_approval(BASH, {"command": "make"}, ctx)
    new_resolver().record_project_approval(BASH, {"command": "make"}, ctx)  # no duplicate
    assert read_settings(tmp_path) == {
        "theme": "dark",
        "permissions": {"deny": ["Bash(rm:*)"], "allow": ["Bash(ls)", "Bash(make)"]},
    }
    assert new_resolver().decide(BASH, {"command": "rm x"}, ctx).decision is Decision.DENY


def test_file_changes_are_seen_by_a_live_resolver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file is re-read at most every RECHECK_SECONDS; without the delay, every change counts.
    monkeypatch.setattr(settings_module, "RECHECK_SECONDS", 0.0)
    ctx = context(tmp_path)
    resolver = new_resolver()
    assert resolver.decide(BASH, {"command": "ls"}, ctx).decision is Decision.ASK
    path = Path(settings_path(str(tmp_path)))
    path.parent.mkdir()
    path.write_text(json.dumps({"permissions": {"deny": ["Bash(ls)"]}}))
    assert resolver.decide(BASH, {"command": "ls"}, ctx).decision is Decision.DENY
    path.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}}))
    assert resolver.decide(BASH, {"command": "ls"}, ctx).decision is Decision.ALLOW


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "invalid permission settings"),
        ("[]", "top level"),
        ('{"permissions": []}', "'permissions' must be an object"),
        ('{"permissions": {"allow": "Bash"}}', "must be a list"),
        ('{"permissions": {"allow": ["Bash("]}}', "allow rule"),
        ('{"permissions": {"allow": ["Bash"], "deny": ["Read(x"]}}', "deny rule"),
        ('{"permissions": {"defaultMode": "reckless"}}', "unknown permission mode"),
        ('{"permissions": {"alow": []}}', "unknown key"),
    ],
)
def test_malformed_settings_file_is_refused_whole(
    tmp_path: Path, content: str, fragment: str
) -> None:
    path = Path(settings_path(str(tmp_path)))
    path.parent.mkdir()
    path.write_text(content)
    resolver = new_resolver()
    with pytest.raises(ValueError) as info:
        resolver.decide(BASH, {"command": "ls"}, context(tmp_path))
    assert str(path) in str(info.value) and fragment in str(info.value)
    with pytest.raises(ValueError):
        resolver.record_project_approval(BASH, {"command": "ls"}, context(tmp_path))
    assert path.read_text() == content  # a broken file is never overwritten


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context(tmp_path)
    new_resolver().record_project_approval(BASH, {"command": "ls"}, ctx)
    before = Path(settings_path(str(tmp_path))).read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        new_resolver().record_project_approval(BASH, {"command": "make"}, ctx)
    assert Path(settings_path(str(tmp_path))).read_bytes() == before
    leftovers = [p.name for p in (tmp_path / ".fastgate").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_concurrent_approvals_lose_nothing(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    errors: list[BaseException] = []

    def approve(i: int) -> None:
        try:
            new_resolver().record_project_approval(BASH, {"command": f"make t{i}"}, ctx)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=approve, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(read_settings(tmp_path)["permissions"]["allow"]) == sorted(
        f"Bash(make t{i})" for i in range(16)
    )


@pytest.mark.parametrize(
    ("command", "fragment"),
    [("make > out.txt", "redirects"), ("$X y", "not known"), ("echo 'x", "unparseable")],
)
def test_unexpressible_commands_are_refused(tmp_path: Path, command: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        new_resolver().record_project_approval(BASH, {"command": command}, context(tmp_path))
    assert not os.path.exists(settings_path(str(tmp_path)))


def test_sensitive_calls_cannot_be_approved_for_the_project(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sensitive"):
        new_resolver().record_project_approval(WRITE, {"file_path": ".env"}, context(tmp_path))


def test_model_cannot_write_the_settings_file_silently(tmp_path: Path) -> None:
    resolver = PermissionResolver(
        PermissionConfig(allow=["Write", "Bash(echo:*)"]), PermissionMode.YOLO, ApprovalStore()
    )
    ctx = context(tmp_path)
    target = ".fastgate/settings.local.json"
    assert resolver.decide(WRITE, {"file_path": target}, ctx).decision is Decision.ASK
    command = {"command": f"echo '{{}}' > {target}"}
    assert resolver.decide(BASH, command, ctx).decision is Decision.ASK


def test_audit_types() -> None:
    event = AuditEvent("e1", "s1", "Bash", Decision.DENY, DecisionSource.RULE, "r", "abc", 1.0)

    class Sink:
        def __init__(self) -> None:
            self.events: list[AuditEvent] = []

        def record(self, event: AuditEvent) -> None:
            self.events.append(event)

    sink = Sink()
    assert isinstance(sink, AuditSink)
    sink.record(event)
    assert sink.events == [event]
    assert not isinstance(object(), AuditSink)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.text(alphabet="ab ()'\"$*;&|<>\\`~#=-_.\t", min_size=1, max_size=8),
        min_size=1,
        max_size=4,
    )
)
def test_project_rule_round_trips_any_words(tmp_path: Path, words: list[str]) -> None:
    root = tmp_path / str(abs(hash(tuple(words))))
    root.mkdir(exist_ok=True)
    command = "prog " + " ".join(shlex.quote(w) for w in words)
    ctx = context(root)
    try:
        written = new_resolver().record_project_approval(BASH, {"command": command}, ctx)
    except ValueError:  # a word no rule can name exactly ('*', '$x'...): nothing is written
        assert not os.path.exists(settings_path(str(root)))
        return
    assert written.startswith("Bash(prog")
    assert new_resolver().decide(BASH, {"command": command}, ctx).decision is Decision.ALLOW
    other = new_resolver().decide(BASH, {"command": command + " extra"}, ctx)
    assert other.decision is Decision.ASK


def test_own_and_project_rules_combine_and_follow_a_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The config allows every Write; the project file first denies one path, then asks for it.
    monkeypatch.setattr(settings_module, "RECHECK_SECONDS", 0.0)
    ctx = context(tmp_path)
    resolver = new_resolver(allow=("Write",))
    target = tmp_path / "generated.py"
    other = {"file_path": str(tmp_path / "main.py")}
    path = Path(settings_path(str(tmp_path)))
    path.parent.mkdir()
    path.write_text(json.dumps({"permissions": {"deny": ["Write(./generated.py)"]}}))
    for _ in range(2):  # the second time from what was remembered
        assert resolver.decide(WRITE, {"file_path": str(target)}, ctx).decision is Decision.DENY
        assert resolver.decide(WRITE, other, ctx).decision is Decision.ALLOW
    path.write_text(json.dumps({"permissions": {"ask": ["Write(./generated.py)"]}}))
    assert resolver.decide(WRITE, {"file_path": str(target)}, ctx).decision is Decision.ASK
    assert resolver.decide(WRITE, other, ctx).decision is Decision.ALLOW
