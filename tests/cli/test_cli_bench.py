"""``fastgate bench --help`` names every registered scenario (the list a user picks from)."""

from __future__ import annotations

import pytest

from fastgate.cli.bench.runner import SCENARIOS
from fastgate.cli.main import build_parser


def test_the_scenario_help_lists_every_registered_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    for name in SCENARIOS:
        assert name in shown.split("--scenario NAME", 1)[1], name
