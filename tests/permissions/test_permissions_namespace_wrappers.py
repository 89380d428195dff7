"""Programs that run a command in other namespaces, control groups, containers or sandboxes
(``nsenter``, ``systemd-run``, ``bwrap``, ``firejail``, ``ip netns exec``, ...) are wrappers:
deny and ask rules meet the command they run, however their options are spelled; an option
that cannot be followed makes the command unknown (refused where deny rules exist), and allow
rules never see through them (the command runs with other mounts, users or limits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision
from tests.permissions_round3_kit import YOLO, ruling

ESCAPES = [
    "nsenter -t 1 -m rm victim",
    "nsenter --target=1 --mount -- rm victim",
    "nsenter -a -t1 rm victim",
    "nsenter --targ 1 --mo rm victim",  # abbreviated long options
    "systemd-run --user --wait rm victim",
    "systemd-run -u unit -p Nice=5 rm victim",
    "systemd-run --scope -- rm victim",
    "systemd-run --working-directory /tmp rm victim",
    "bwrap --bind / / rm victim",
    "bwrap --ro-bind / / --dev /dev rm victim",
    "bwrap rm victim",
    "firejail rm victim",
    "firejail --noprofile rm victim",
    "firejail --private=/tmp rm victim",
    "nsjail -Mo -- /bin/rm victim",
    "systemd-nspawn -D /srv/c rm victim",
    "capsh -- -c 'rm victim'",
    "capsh --drop=cap_net_raw -- -c 'rm victim'",
    "numactl -N 0 rm victim",
    "numactl --cpunodebind=0 rm victim",
    "cgexec -g cpu:/x rm victim",
    "daemonize -c /tmp /bin/rm victim",
    "start-stop-daemon --start --exec /bin/rm -- victim",
    "chpst -u nobody rm victim",
    "ip netns exec n1 rm victim",
    "ip netns ex n1 rm victim",  # ip takes any prefix of a subcommand
    "ip -all netns exec rm victim",
    "ip vrf exec blue rm victim",
    "ip -b commands.txt",  # a batch file may hold ``netns exec``
    "setarch x86_64 -R rm victim",
    "setarch i386 --3gb rm victim",
    "linux64 rm victim",
    "sudo nsenter -t 1 -m rm victim",  # nested wrappers
    "timeout 5 bwrap --bind / / rm victim",
]


@pytest.mark.parametrize("command", ESCAPES)
def test_a_deny_rule_meets_the_command_a_namespace_wrapper_runs(
    command: str, tmp_path: Path
) -> None:
    decided = ruling(command, tmp_path, mode=YOLO, deny=["Bash(rm:*)"])
    assert decided.decision is Decision.DENY, decided


@pytest.mark.parametrize(
    "command",
    ["nsenter -t 1 -m ls", "systemd-run --user ls", "bwrap --bind / / ls", "firejail ls"],
)
def test_an_allow_rule_of_the_inner_command_does_not_see_through_them(
    command: str, tmp_path: Path
) -> None:
    assert ruling(command, tmp_path, allow=["Bash(ls:*)"]).decision is Decision.ASK


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("ip addr show", "Bash(ip addr:*)"),
        ("ip -br link", "Bash(ip -br:*)"),
        ("ip route get 1.1.1.1", "Bash(ip route:*)"),
        ("numactl -N 0 ls", "Bash(ls:*)"),  # same command, same privileges
        ("setarch x86_64 -R ls", "Bash(ls:*)"),
    ],
)
def test_what_runs_nothing_else_is_still_allowed(command: str, rule: str, tmp_path: Path) -> None:
    assert ruling(command, tmp_path, allow=[rule]).decision is Decision.ALLOW
    assert ruling(command, tmp_path, mode=YOLO, deny=["Bash(rm:*)"]).decision is Decision.ALLOW
