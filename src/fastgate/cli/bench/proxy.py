"""The "proxy" scenario: a 64 MiB download through the sandbox's network proxy against the
same download made directly, in the same run.

A local HTTP server (its own process) serves the bytes; a client process downloads them
directly, through a ``CONNECT`` tunnel (what HTTPS takes), as a plain proxied ``GET``, and
through a reference forwarder (a process that only copies bytes with blocking ``splice``: the
least any relay in between can cost here), interleaved round by round. The proxy runs on the
scenario's event loop, as it does in a server. Values are throughput ratios: higher is better.
"""

from __future__ import annotations

import asyncio

from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.runtime import loop_factory

SIZE = 64 << 20
CI_PROXY = 0.4  # CI's bound: a regression guard; a busy shared VM starves any relay in between


def run_proxy(config: BenchConfig, loop: str) -> list[Measurement]:
    try:
        from fastgate.sandbox._throughput import measure
    except ImportError:
        return []  # the 'sandbox' extra is not installed: nothing to measure
    rounds = max(3, config.rounds // 2)
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        result = runner.run(measure(SIZE, rounds))
    mib = 1 << 20
    direct = f"{result.direct / mib:,.0f} MiB/s direct"
    target = Target(">=", 0.8, ci_bound=CI_PROXY)
    return [
        Measurement(
            "proxy",
            "64 MiB download: CONNECT tunnel / direct",
            result.tunnel_ratio,
            reference="the same download direct",
            target=target,
            detail=f"{result.tunnel / mib:,.0f} vs {direct}, median of {rounds} "
            f"(relay: {result.relay})",
        ),
        Measurement(
            "proxy",
            "64 MiB download: plain proxied GET / direct",
            result.plain_ratio,
            reference="the same download direct",
            target=target,
            detail=f"{result.plain / mib:,.0f} vs {direct}, median of {rounds}",
        ),
        Measurement(
            "proxy",
            "64 MiB download: reference forwarder / direct",
            result.forwarder_ratio,
            reference="the same download direct",
            detail=f"{result.forwarder / mib:,.0f} vs {direct}: a process copying with "
            "blocking splice, the least an extra hop costs on this machine",
        ),
    ]
