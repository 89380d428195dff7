"""FileLockManager and lock_key: canonical keys, ordered multi-locks, cleanup (SPEC §8.3)."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from fastgate import FileLockManager, lock_key


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_lock_key_canonicalizes_aliases(tmp_path: Path) -> None:
    real = tmp_path / "dir" / "file.txt"
    real.parent.mkdir()
    real.write_text("x")
    (tmp_path / "link.txt").symlink_to(real)
    (tmp_path / "dirlink").symlink_to(real.parent)
    key = lock_key(real)
    assert lock_key(tmp_path / "link.txt") == key
    assert lock_key(tmp_path / "dirlink" / "file.txt") == key
    assert lock_key(f"{tmp_path}/dir/../dir/./file.txt") == key
    assert os.path.isabs(key)


def test_lock_key_of_a_file_not_yet_created_resolves_its_parent(tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(tmp_path)
    assert lock_key(tmp_path / "alias" / "new.txt") == lock_key(tmp_path / "new.txt")


def test_lock_key_survives_symlink_loops(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert isinstance(lock_key(tmp_path / "a"), str)  # returns, no hang


@pytest.mark.parametrize("bad", ["", "a\x00b"])
def test_lock_key_refuses_unusable_paths(bad: str) -> None:
    with pytest.raises(ValueError):
        lock_key(bad)


async def test_aliases_share_one_lock(tmp_path: Path) -> None:
    real = tmp_path / "f.txt"
    real.write_text("x")
    (tmp_path / "alias.txt").symlink_to(real)
    locks = FileLockManager()
    order: list[str] = []
    release = asyncio.Event()

    async def hold(path: Path, name: str) -> None:
        async with locks.acquire(path):
            order.append(name)
            await release.wait()

    t1 = asyncio.create_task(hold(real, "real"))
    t2 = asyncio.create_task(hold(tmp_path / "alias.txt", "alias"))
    t3 = asyncio.create_task(hold(tmp_path / "sub" / ".." / "f.txt", "dotdot"))
    await _settle()
    assert order == ["real"]  # the others wait on the same key
    assert len(locks) == 1
    release.set()
    await asyncio.gather(t1, t2, t3)
    assert order == ["real", "alias", "dotdot"]
    assert len(locks) == 0


async def test_acquire_many_deduplicates_and_empties_the_table(tmp_path: Path) -> None:
    locks = FileLockManager()
    a, b = tmp_path / "a", tmp_path / "b"
    async with locks.acquire_many([b, a, a, tmp_path / "x" / ".." / "b"]):
        assert len(locks) == 2 and locks.locked(a) and locks.locked(b)
    assert len(locks) == 0


async def test_random_multi_path_holders_never_deadlock(tmp_path: Path) -> None:
    locks = FileLockManager()
    paths = [tmp_path / f"p{i}" for i in range(6)]
    rng = random.Random(1234)
    inside: set[str] = set()
    max_seen = 0

    async def worker(seed: int) -> None:
        nonlocal max_seen
        local = random.Random(seed)
        for _ in range(20):
            chosen = local.sample(paths, local.randint(1, 4))
            local.shuffle(chosen)  # callers pass any order; the manager sorts
            async with locks.acquire_many(chosen):
                keys = {lock_key(p) for p in chosen}
                assert not (keys & inside), "two holders inside the same key"
                inside.update(keys)
                max_seen = max(max_seen, len(inside))
                await asyncio.sleep(0)
                inside.difference_update(keys)

    async with asyncio.timeout(30):
        await asyncio.gather(*(worker(rng.randrange(1 << 30)) for _ in range(16)))
    assert len(locks) == 0
    assert max_seen >= 2  # there was real concurrency


async def test_cancelled_while_waiting_for_a_later_key_releases_earlier_ones(
    tmp_path: Path,
) -> None:
    locks = FileLockManager()
    a, b = tmp_path / "a", tmp_path / "b"
    release = asyncio.Event()

    async def hold_b() -> None:
        async with locks.acquire(b):
            await release.wait()

    holder = asyncio.create_task(hold_b())
    await _settle()
    entered: list[str] = []

    async def take_both() -> None:
        async with locks.acquire_many([a, b]):
            entered.append("both")

    victim = asyncio.create_task(take_both())
    await _settle()
    assert locks.locked(a)  # took `a`, waits for `b`
    victim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await victim
    assert not locks.locked(a)
    async with locks.acquire(a):  # free again
        pass
    release.set()
    await holder
    assert entered == [] and len(locks) == 0


async def test_key_handed_to_a_cancelled_waiter_passes_on(tmp_path: Path) -> None:
    locks = FileLockManager()
    path = tmp_path / "f"
    order: list[str] = []
    hold = asyncio.Event()
    victim: asyncio.Task[None] | None = None

    async def first() -> None:
        async with locks.acquire(path):
            await hold.wait()
        assert victim is not None
        victim.cancel()  # the key was just handed to it

    async def take(name: str) -> None:
        async with locks.acquire(path):
            order.append(name)

    t0 = asyncio.create_task(first())
    await _settle()
    victim = asyncio.create_task(take("victim"))
    nxt = asyncio.create_task(take("next"))
    await _settle()
    hold.set()
    await t0
    with pytest.raises(asyncio.CancelledError):
        await victim
    await nxt
    assert order == ["next"] and len(locks) == 0


async def test_same_owner_reacquiring_is_refused_not_deadlocked(tmp_path: Path) -> None:
    locks = FileLockManager()
    owner = object()
    async with locks.acquire(tmp_path / "f", owner=owner):
        with pytest.raises(RuntimeError, match="same owner"):
            async with locks.acquire(tmp_path / "f", owner=owner):
                pass
        assert len(locks) == 1
    assert len(locks) == 0


async def test_uncontended_lock_never_yields(tmp_path: Path) -> None:
    locks = FileLockManager()
    ran: list[int] = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    async with locks.acquire_many([tmp_path / "a", tmp_path / "b", tmp_path / "c"]):
        pass
    assert ran == []


async def test_lock_context_misuse_is_a_clear_error(tmp_path: Path) -> None:
    locks = FileLockManager()
    ctx = locks.acquire(tmp_path / "f")
    async with ctx:
        pass
    with pytest.raises(RuntimeError, match="only once"):
        async with ctx:
            pass
    with pytest.raises(RuntimeError, match="without being held"):
        await locks.acquire(tmp_path / "g").__aexit__(None, None, None)
    assert len(locks) == 0
