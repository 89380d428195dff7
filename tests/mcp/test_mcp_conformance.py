"""The official MCP conformance suite's client scenarios against fastgate's bridge.

``@modelcontextprotocol/conformance`` (installed by ``scripts/setup-mcp-servers``, never fetched
here) starts a test server per scenario and runs ``tests/mcp/conformance_client.py``, which
connects with ``MCPBridge`` and calls through a ``ToolExecutor``. A scenario passes by the
suite's own rule: no FAILURE and no WARNING in its ``checks.json``. Every client scenario of the
stable line (0.1.16) runs, and every 2026-07-28 scenario of the pre-release line at that
protocol revision. One node process per scenario, each in a process group of its own that must
be empty afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import fastgate
from fastgate.mcp._stdio import process_group_members
from tests.mcp.servers import INSTALLED, ROOT, SETUP

pytestmark = pytest.mark.slow  # the suite's scenarios: run once in CI, on the compiled build

RUNNER = Path(__file__).parent / "conformance_client.py"
NODE_HOOK = Path(__file__).parent / "conformance_node" / "register.mjs"
STABLE = "0.1.16"
PRERELEASE = "0.2.0-alpha.12"
REVISION_2026 = "2026-07-28"
TIMEOUT = 120  # seconds for one scenario, the suite's own 30 s client timeout included

# The stable line's client scenarios: 26, of which 22 are authorization.
STABLE_SCENARIOS = (
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
)
# The pre-release line's scenarios of the 2026-07-28 revision, run at that revision's wire.
SCENARIOS_2026 = (
    "tools_call",
    "request-metadata",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
)
# Beyond the 2026 revision, the pre-release line's fixed 2025-03-26 mock and its extensions that
# fastgate speaks, at their own revisions.
PRERELEASE_OTHERS = (
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/enterprise-managed-authorization",
)
ELICITING = {"elicitation-sep1034-client-defaults", "sep-2322-client-request-state"}
# The stable line's 2025-03-26 metadata mock serves authorization server metadata naming the
# issuer <origin>/oauth from the root well-known address: RFC 8414 §3.3 says a client must refuse
# that (the suite's later releases fixed the mock; the pre-release run above passes it).
REFUSED_BY_DESIGN = {(STABLE, "auth/2025-03-26-oauth-metadata-backcompat"): "issuer mismatch"}


def suite(version: str) -> list[str]:
    """``node <hook> <the suite's CLI>``, or a skip saying what is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the MCP conformance suite cannot run")
    cli = (
        INSTALLED
        / f"conformance-{version}"
        / "node_modules"
        / "@modelcontextprotocol"
        / "conformance"
        / "dist"
        / "index.js"
    )
    if not cli.exists():
        pytest.skip(f"the MCP conformance suite {version} is not installed: {SETUP}")
    major, minor = _node_version(node)
    if (major, minor) < (20, 6):
        pytest.skip(f"node {major}.{minor} has no module.register; the suite needs node >= 20.6")
    return [node, "--import", str(NODE_HOOK), str(cli)]


def _node_version(node: str) -> tuple[int, int]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.match(r"v(\d+)\.(\d+)", out.strip())
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def run_scenario(
    version: str, scenario: str, out: Path, *extra: str
) -> tuple[list[dict[str, Any]], str]:
    """Run one scenario: its checks and the client's stderr. The suite's processes run in a
    process group of their own, which must be empty when the suite has returned."""
    command = [
        *suite(version),
        "client",
        "--command",
        f"{sys.executable} {RUNNER}",
        "--scenario",
        scenario,
        "-o",
        str(out),
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_CONFORMANCE_")}
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate()
        raise
    assert not process_group_members(process.pid), "the suite left processes behind"
    found = sorted(out.rglob("checks.json"))
    assert found, f"{scenario}: the suite wrote no checks.json:\n{output[-3000:]}"
    stderr = found[0].with_name("stderr.txt")
    return json.loads(found[0].read_text()), stderr.read_text() if stderr.exists() else output


def assert_passes(scenario: str, checks: list[dict[str, Any]], stderr: str) -> None:
    """The suite's rule: no FAILURE, no WARNING."""
    bad = [
        f"{c['id']}: {c['status']}: {c.get('errorMessage') or c.get('description')}"
        for c in checks
        if c["status"] in ("FAILURE", "WARNING")
    ]
    assert not bad, f"{scenario}:\n" + "\n".join(bad) + f"\nclient stderr:\n{stderr[-3000:]}"
    assert any(c["status"] == "SUCCESS" for c in checks), f"{scenario}: no check succeeded"


def needs_elicitation(scenario: str) -> None:
    if scenario in ELICITING and not hasattr(fastgate, "ElicitationRequest"):
        pytest.skip("elicitation not yet available")


@pytest.mark.parametrize("scenario", STABLE_SCENARIOS)
def test_stable_client_scenario(scenario: str, tmp_path: Path) -> None:
    needs_elicitation(scenario)
    checks, stderr = run_scenario(STABLE, scenario, tmp_path)
    refusal = REFUSED_BY_DESIGN.get((STABLE, scenario))
    if refusal is not None:
        # The client stops at the metadata and says why; nothing after it was attempted.
        assert refusal in stderr and "unauthorized" in stderr, stderr[-3000:]
        failed = {c["id"] for c in checks if c["status"] == "FAILURE"}
        assert failed == {"client-registration", "authorization-request", "token-request"}
        return
    assert_passes(scenario, checks, stderr)


@pytest.mark.parametrize(
    "scenario",
    SCENARIOS_2026,
)
def test_2026_client_scenario(scenario: str, tmp_path: Path) -> None:
    needs_elicitation(scenario)
    checks, stderr = run_scenario(PRERELEASE, scenario, tmp_path, "--spec-version", REVISION_2026)
    assert_passes(scenario, checks, stderr)


@pytest.mark.parametrize("scenario", PRERELEASE_OTHERS)
def test_prerelease_other_client_scenario(scenario: str, tmp_path: Path) -> None:
    checks, stderr = run_scenario(PRERELEASE, scenario, tmp_path)
    assert_passes(scenario, checks, stderr)


def listed_client_scenarios(version: str) -> dict[str, set[str]]:
    """The suite's own list of its client scenarios, each with its revisions."""
    out = subprocess.run(
        [*suite(version), "list"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    section = out.split("Client scenarios", 1)[1].split("\n\n", 1)[0]
    return {
        m.group(1): set(m.group(2).split(","))
        for m in re.finditer(r"^\s+- (\S+) \[([^\]]*)\]", section, re.MULTILINE)
    }


def test_every_client_scenario_of_both_lines_is_run() -> None:
    stable = listed_client_scenarios(STABLE)
    assert set(STABLE_SCENARIOS) == set(stable)
    assert len(stable) == 26 and sum(s.startswith("auth/") for s in stable) == 22
    prerelease = listed_client_scenarios(PRERELEASE)
    of_2026 = {name for name, revisions in prerelease.items() if REVISION_2026 in revisions}
    assert set(SCENARIOS_2026) == of_2026
    assert set(PRERELEASE_OTHERS) <= set(prerelease)
