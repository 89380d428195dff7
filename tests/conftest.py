"""Test harness: every ``async def`` test runs once on asyncio's loop and once on uvloop
(uvloop only when marked ``one_loop`` or ``slow``).

No pytest-asyncio: a small hook runs the coroutine in ``asyncio.Runner`` with the chosen loop and
fails the test if it leaves tasks behind. Sync tests (hypothesis state machines) ask for the
``runner`` fixture to drive async steps on the same loops.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from hypothesis import settings

from fastgate.runtime import loop_factory

# Examples are judged by what they assert, never by how long one took: the machine running the
# suite may be busy (CI shares its cores), and a per-example deadline then fails at random.
settings.register_profile("fastgate", deadline=None)
settings.load_profile("fastgate")

# What the sandbox remembers of its searches goes to the user's cache directory; a test run
# (its subprocesses too) keeps it in a directory of its own, removed at the end.
_CACHE = tempfile.TemporaryDirectory(prefix="fastgate-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE.name


def pytest_unconfigure(config: pytest.Config) -> None:
    _CACHE.cleanup()


LOOPS: tuple[str, ...]
try:
    import uvloop  # noqa: F401

    LOOPS = ("asyncio", "uvloop")
except ImportError:  # a user's machine without the extra; CI always has it
    if os.environ.get("CI"):
        raise
    LOOPS = ("asyncio",)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wants_loop = inspect.iscoroutinefunction(metafunc.function) or (
        "runner" in metafunc.fixturenames
    )
    if wants_loop and "loop_name" not in metafunc.fixturenames:
        metafunc.fixturenames.append("loop_name")
    if "loop_name" in metafunc.fixturenames:
        marked = metafunc.definition.get_closest_marker
        one = marked("one_loop") is not None or marked("slow") is not None
        metafunc.parametrize("loop_name", LOOPS[-1:] if one else LOOPS)


@pytest.fixture
def runner(loop_name: str) -> Iterator[asyncio.Runner]:
    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as r:
        yield r


@pytest.fixture
def runner_heap_frozen() -> Iterator[None]:
    """For tests that time tail latencies: the test runner's own heap (thousands of collected
    tests by the end of a run) is moved out of the collector's reach, so that a full collection
    during the test scans only what the test made. Without it one collection late in a run
    stopped the whole process for about a second, a pause no scheduler can be fair around."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _run_checked(test: Callable[..., Coroutine[Any, Any, None]], **kwargs: Any) -> None:
    await test(**kwargs)
    await asyncio.sleep(0)  # let done-callbacks of finished tasks run
    leaked = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in leaked:
        task.cancel()
    assert not leaked, f"test left {len(leaked)} task(s) running: {leaked!r}"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None
    loop_name = str(pyfuncitem.callspec.params["loop_name"])
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as r:
        r.run(_run_checked(test, **kwargs))
    return True
