"""The command line: ``fastgate info``, ``fastgate bench``, ``fastgate call``."""

from fastgate.cli.main import main as main
