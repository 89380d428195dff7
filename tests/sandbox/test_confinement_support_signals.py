"""What ``reason`` says of signals without user namespaces where Landlock does not scope them
(ABI < 6): seccomp refuses them to the server and its process group, and the launcher's own
filter to the command's supervisors (its launcher and the process that started it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fastgate.sandbox import _kernel, _support, sandbox_support


@pytest.fixture(name="unscoped")
def unscoped_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if _kernel.landlock_abi() < 5:
        pytest.skip("Landlock ABI 5 is not available here")
    monkeypatch.setattr(_kernel, "landlock_abi", lambda: 5)
    monkeypatch.setattr(_support, "namespaces_missing", lambda: "simulated: no user namespaces")
    _support.forget_support()
    try:
        yield
    finally:
        _support.forget_support()


def test_the_reason_names_every_process_signals_are_refused_to(unscoped: None) -> None:
    support = sandbox_support()
    assert support.available and support.mechanism == "landlock+seccomp", support
    assert "Landlock ABI 5 does not scope signals" in support.reason
    for whom in ("the server and its process group", "supervisors", "its launcher", "resident"):
        assert whom in support.reason, (whom, support.reason)
    assert "process group only" not in support.reason
