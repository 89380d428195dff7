"""Throughput of a download through the sandbox's network proxy, against the same download
direct and through a reference forwarder, measured in one run (SPEC §22; issue acceptance: a
64 MiB download through the proxy at least 0.8x direct).

    FASTGATE_NO_EXTENSIONS=1 .venv/bin/python -m benchmarks.sandbox_proxy [size_mib] [rounds]
"""

from __future__ import annotations

from fastgate.sandbox._throughput import main

if __name__ == "__main__":
    main()
