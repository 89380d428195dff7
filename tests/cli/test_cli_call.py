"""``fastgate call`` (SPEC §17), run as the installed command in a subprocess: the decision
trail, the result and timings, ``--json``, ``--dry-run``, settings files, and every exit status."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate.pipeline import STAGES

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

FASTGATE = str(Path(sys.executable).with_name("fastgate"))

CLAUDE_SETTINGS = {
    "model": "claude-sonnet",
    "env": {"FOO": "1"},
    "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": []}]},
    "permissions": {
        "allow": ["Bash(git status)", "Edit(./src/**)", "Frobnicate(x)", "Bash(src/**)"],
        "deny": ["Read(./secrets/**)", "Bash(rm:*)"],
        "defaultMode": "acceptEdits",
    },
}


def fastgate_call(workspace: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command with only the settings it is given (discovery has tests of its own)."""
    return subprocess.run(
        [FASTGATE, "call", *argv, "--workspace", str(workspace), "--no-discover"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def as_json(workspace: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    done = fastgate_call(workspace, *argv, "--json")
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr  # one object, nothing else on stdout
    return done.returncode, json.loads(lines[0]), done.stderr


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("# TODO: the real thing\nprint('hi')\n")
    (tmp_path / "notes.md").write_text("nothing to do\n")
    (tmp_path / ".env").write_text("TOKEN=1\n")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("TODO rotate\n")
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(CLAUDE_SETTINGS))
    return tmp_path


def test_a_read_only_call_prints_the_trail_the_result_and_timings(workspace: Path) -> None:
    done = fastgate_call(workspace, "grep", '{"pattern": "TODO"}')
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "decision trail",
        "validation  ok",
        "no rule matched: DEFAULT mode allows READ_ONLY tools",
        "sensitive   no",
        "approval    not needed",
        "decided by  mode: allow",
        "result  ok",
        "src/app.py",
        "timings  admission wait ",
        " ms · run ",
    ):
        assert expected in out, out


def test_json_is_one_object_with_decision_result_and_timings(workspace: Path) -> None:
    status, report, _ = as_json(workspace, "read", '{"file_path": "src/../src/app.py"}')
    assert status == 0
    assert report["decision"]["decision"] == "allow"
    assert report["decision"]["stage"] == "mode" and report["decision"]["source"] == "mode"
    assert report["result"]["ok"] is True and "TODO" in report["result"]["content"]
    assert report["result"]["meta"]["tool_name"] == "read"
    assert report["timings"]["admission_wait_ms"] >= 0 and report["timings"]["run_ms"] > 0
    paths = [s["outcome"] for s in report["trail"] if s["stage"] == "path"]
    assert paths == [f"file_path: src/../src/app.py -> {workspace.resolve()}/src/app.py"]
    # Every stage the pipeline went through, as its tracer recorded them.
    assert [s["stage"] for s in report["stages"]] == list(STAGES)
    assert [s["outcome"] for s in report["stages"]] == ["passed"] * (len(STAGES) - 1) + ["ok"]
    assert all(s["ms"] >= 0 for s in report["stages"])


def test_a_settings_file_in_claude_codes_shape_loads_with_sources_and_warnings(
    workspace: Path,
) -> None:
    settings = str(workspace / ".claude" / "settings.json")
    status, report, stderr = as_json(
        workspace, "bash", '{"command": "git status && rm -rf build"}', "--settings", settings
    )
    assert status == 3
    assert report["mode"] == "accept_edits"  # the file's defaultMode
    decision = report["decision"]
    assert decision["decision"] == "deny" and decision["rule"] == "Bash(rm:*)"
    assert decision["rule_source"] == settings
    commands = [s["outcome"] for s in report["trail"] if s["stage"] == "command"]
    assert commands == ["`git status`", "`rm -rf build`"]
    assert report["result"]["error"]["code"] == "PERMISSION_DENIED"
    assert report["result"]["ran"] is False
    # Rules that can never match are named on stderr, with their file.
    assert f"Frobnicate(x) ({settings}): no registered tool answers" in stderr
    assert f"Bash(src/**) ({settings}): a path specifier" in stderr
    assert len(report["warnings"]) == 2
    # On a terminal too: the rule's line names its file.
    done = fastgate_call(workspace, "bash", '{"command": "rm -rf build"}', "--settings", settings)
    assert done.returncode == 3
    assert f"rules       rule Bash(rm:*) denies `rm -rf build`  [{settings}]" in done.stdout
    assert "decided by  rules: deny, source rule" in done.stdout


def test_warnings_keep_each_rules_source_beside_command_line_rules(workspace: Path) -> None:
    settings = workspace / "inert.json"
    permissions = {"allow": ["Frobnicate(x)"], "disableAutoMode": ""}
    settings.write_text(json.dumps({"permissions": permissions}))
    status, report, stderr = as_json(
        workspace,
        "bash",
        '{"command": "echo hi"}',
        "--settings",
        str(settings),
        "--allow",
        "Bash(echo:*)",
        "--deny",
        "Nope",
    )
    assert status == 0, stderr
    assert report["decision"]["rule_source"] == "--allow"
    assert report["warnings"] == [
        f"allow rule Frobnicate(x) ({settings}): no registered tool answers to the name "
        "Frobnicate, so it can never match",
        f"{settings}: permissions.disableAutoMode is read but has no effect in fastgate",
        "deny rule Nope (--deny): no registered tool answers to the name Nope, so it can never "
        "match",
    ]
    assert stderr.splitlines() == [f"warning: {w}" for w in report["warnings"]]


def test_rules_given_on_the_command_line_say_so(workspace: Path) -> None:
    status, report, _ = as_json(
        workspace, "bash", '{"command": "echo hello"}', "--allow", "Bash(echo:*)"
    )
    assert status == 0
    assert report["decision"]["rule"] == "Bash(echo:*)"
    assert report["decision"]["rule_source"] == "--allow"
    assert report["result"]["content"] == "hello\nExit code: 0"


def test_stages_after_a_deny_are_shown_as_not_reached(workspace: Path) -> None:
    command = '{"command": "rm -rf x"}'
    status, report, _ = as_json(workspace, "bash", command, "--deny", "Bash(rm:*)")
    assert status == 3
    trail = {step["stage"]: step["outcome"] for step in report["trail"]}
    # The mode's default is shown for what it is: not what decided.
    assert trail["mode"] == "default: ask for EXECUTE tools (not used: a rule decided)"
    assert trail["guards"] == "not reached: denied above"
    assert trail["approval"] == "not reached: denied above"
    assert report["decision"]["stage"] == "rules" and report["decision"]["decision"] == "deny"


def test_a_closed_output_pipe_ends_the_command_quietly(workspace: Path) -> None:
    # ``fastgate call ... | head -1``: the reader leaves before the report is written.
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [FASTGATE, "call", "read", '{"file_path": "notes.md"}', "--workspace", str(workspace)],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.close(writer)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr


def test_dry_run_decides_without_invoking(workspace: Path) -> None:
    args = '{"file_path": "src/new.py", "content": "x = 1\\n"}'
    status, report, _ = as_json(workspace, "write", args, "--dry-run")
    assert status == 4  # DEFAULT mode would ask
    assert report["decision"]["decision"] == "ask"
    status, report, _ = as_json(workspace, "write", args, "--dry-run", "--allow", "Edit(./src/**)")
    assert status == 0
    assert report["result"]["ran"] is False and report["timings"]["run_ms"] is None
    status, _, _ = as_json(workspace, "write", args, "--dry-run", "--deny", "Edit(./src/**)")
    assert status == 3
    assert not (workspace / "src" / "new.py").exists()


def test_approve_answers_every_ask(workspace: Path) -> None:
    fail = '{"command": "echo $PAGER; exit 3"}'
    status, report, _ = as_json(workspace, "bash", fail, "--approve", "once")
    assert status == 1  # ran and failed
    assert report["decision"] == {
        **report["decision"],
        "decision": "allow",
        "stage": "approval",
        "source": "user",
    }
    assert report["result"]["error"]["details"]["exit_code"] == 3
    assert report["result"]["content"] == "cat\nExit code: 3"
    status, _, _ = as_json(workspace, "bash", '{"command": "true"}', "--approve", "session")
    assert status == 0
    status, report, _ = as_json(workspace, "bash", '{"command": "true"}', "--approve", "never")
    assert status == 3 and report["result"]["error"]["code"] == "USER_REJECTED"
    status, report, _ = as_json(workspace, "bash", '{"command": "true"}')  # no terminal: never
    assert status == 3 and report["result"]["error"]["code"] == "USER_REJECTED"


def test_sensitive_paths_ask_in_every_mode(workspace: Path) -> None:
    status, report, _ = as_json(workspace, "read", '{"file_path": ".env"}', "--mode", "YOLO")
    assert status == 3
    (rules,) = [s for s in report["trail"] if s["stage"] == "rules"]
    assert rules["source"] == "sensitive"
    assert [s["outcome"] for s in report["trail"] if s["stage"] == "sensitive"] == [
        "yes: at least ask, in every mode"
    ]


@pytest.mark.parametrize(
    ("tool", "args", "code", "stage"),
    [
        ("reed", '{"file_path": "a"}', "UNKNOWN_TOOL", "lookup"),
        ("read", '{"path": "a"}', "INVALID_ARGS", "validation"),
        ("read", "[1, 2]", "INVALID_ARGS", "validation"),
        ("read", '{"file_path": "../outside.txt"}', "WORKTREE_VIOLATION", "worktree"),
    ],
)
def test_refusals_before_any_policy_exit_3(
    workspace: Path, tool: str, args: str, code: str, stage: str
) -> None:
    status, report, _ = as_json(workspace, tool, args)
    assert status == 3
    assert report["result"]["error"]["code"] == code
    assert report["decision"]["stage"] == stage and report["decision"]["decision"] is None
    assert [s["stage"] for s in report["stages"]] == list(STAGES[: STAGES.index(stage) + 1])
    assert report["stages"][-1]["outcome"] == code


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["read", "{not json"], "not valid JSON"),
        (["read", '{"file_path": "a.txt", "offset": NaN}'], "NaN is not a JSON value"),
        (["read", '{"file_path": "a.txt", "limit": Infinity}'], "Infinity is not a JSON value"),
        (["read", "[-Infinity]"], "-Infinity is not a JSON value"),
        (["read", "{}", "--mode", "reckless"], "unknown permission mode 'reckless'"),
        (["read", "{}", "--settings", "missing.json"], "missing.json"),
        (["read", "{}", "--deny", "Read("], "Read("),
        (["read", "{}", "--workspace", "/nonexistent/dir"], "not a directory"),
    ],
)
def test_bad_usage_or_configuration_exits_2(
    workspace: Path, argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = subprocess.run(
        [FASTGATE, "call", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workspace,
    )
    assert done.returncode == 2, done.stdout
    assert said in done.stderr
    assert done.stdout == ""


def test_a_malformed_settings_file_is_named(workspace: Path) -> None:
    bad = workspace / "bad.json"
    bad.write_text('{"permissions": {"allow": ["Read(./x)"], "alow": []}}')
    done = fastgate_call(workspace, "read", "{}", "--settings", str(bad))
    assert done.returncode == 2
    assert str(bad) in done.stderr


DEEP = '{"a": ' * 10_000 + "1" + "}" * 10_000  # deeper than any JSON decoder recurses


def test_input_nested_too_deeply_is_a_usage_error_not_a_crash(workspace: Path) -> None:
    done = fastgate_call(workspace, "read", DEEP)
    assert done.returncode == 2 and "the arguments are not valid JSON" in done.stderr
    assert "Traceback" not in done.stderr
    for option in ("--settings", "--mcp-config") if _bridge_available() else ("--settings",):
        deep = workspace / "deep.json"
        deep.write_text('{"permissions": ' + DEEP + "}")
        done = fastgate_call(workspace, "read", "{}", option, str(deep))
        assert done.returncode == 2, (option, done.stderr)
        assert str(deep) in done.stderr and "Traceback" not in done.stderr, done.stderr


def _bridge_available() -> bool:
    try:
        importlib.import_module("fastgate.mcp")
    except ImportError:
        return False
    return True


def test_mcp_config_adds_the_servers_tools(workspace: Path) -> None:
    if not _bridge_available():
        pytest.skip("the mcp extra is not installed")
    fixture = Path(__file__).parents[1] / "mcp" / "fixture_server.py"
    config = workspace / "mcp.json"
    server = {"command": sys.executable, "args": [str(fixture), "stdio"]}
    config.write_text(json.dumps({"mcpServers": {"fix": server}}))
    status, report, stderr = as_json(
        workspace,
        "mcp__fix__echo",
        '{"text": "through the bridge"}',
        "--mcp-config",
        str(config),
        "--allow",
        "mcp__fix",
    )
    assert status == 0, stderr
    assert report["result"]["content"] == "through the bridge"
    assert report["decision"]["rule"] == "mcp__fix"
    status, report, _ = as_json(
        workspace, "mcp__fix__echo", '{"text": "x"}', "--mcp-config", str(config), "--dry-run"
    )
    assert status == 4 and report["result"]["ran"] is False  # an MCP tool asks by default


def test_mcp_config_without_the_bridge_is_a_clear_usage_error(workspace: Path) -> None:
    config = workspace / "mcp.json"
    config.write_text('{"mcpServers": {}}')
    # A Python where fastgate.mcp cannot be imported: its SDK hidden by a module that fails.
    blocker = workspace / "blocked"
    blocker.mkdir()
    (blocker / "mcp.py").write_text("raise ImportError('mcp is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    done = subprocess.run(
        [
            FASTGATE,
            "call",
            "read",
            "{}",
            "--mcp-config",
            str(config),
            "--workspace",
            str(workspace),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "the MCP bridge (fastgate.mcp, the 'mcp' extra)" in done.stderr


@pytest.mark.parametrize(("answer", "status", "code"), [("y", 0, None), ("n", 3, "USER_REJECTED")])
def test_prompt_asks_on_the_terminal(
    workspace: Path, answer: str, status: int, code: str | None
) -> None:
    # A terminal on stdin (a pty) makes prompt the default; the question goes to stderr, so the
    # JSON report on stdout stays one object.
    controller, terminal = os.openpty()
    try:
        os.write(controller, f"{answer}\n".encode())
        done = subprocess.run(
            [FASTGATE, "call", "bash", '{"command": "echo yes"}', "--json", "--no-discover"],
            cwd=workspace,
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == status, done.stderr
    assert "asks for approval: DEFAULT mode asks before EXECUTE tools" in done.stderr
    assert "Allow? [y]es once / [s]ession / [N]o:" in done.stderr
    report = json.loads(done.stdout)
    error = report["result"]["error"]
    assert (error and error["code"]) == code


def test_the_readme_examples_run_on_the_checkout_as_it_says() -> None:
    # The quick start stays two commands; the example after it runs `fastgate call` on the
    # checkout itself: the first explains and runs a search, the second is refused (status 3).
    import shlex

    checkout = Path(__file__).resolve().parents[2]
    readme = (checkout / "README.md").read_text()
    blocks = readme.split("```bash\n")[1:]
    quick_start = [line for line in blocks[0].split("```", 1)[0].splitlines() if line.strip()]
    assert [line.split()[:2] for line in quick_start] == [
        ["bash", "scripts/bench"],
        ["bash", "scripts/test"],
    ]
    examples = [line for line in blocks[1].split("```", 1)[0].splitlines() if line.strip()]
    assert len(examples) == 2
    statuses = []
    for line in examples:
        argv = shlex.split(line, comments=True)
        assert argv[:2] == [".venv/bin/fastgate", "call"], line
        done = subprocess.run(
            [FASTGATE, *argv[1:]],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert "decision trail" in done.stdout and "timings" in done.stdout, done.stderr
        statuses.append(done.returncode)
    assert statuses == [0, 3]
