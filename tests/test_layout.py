"""The package layout holds: packages import only downward (the floors are written once, here),
capabilities reach the core only through package faces, every module imports alone in a fresh
interpreter, and ``fastgate.__all__`` is exactly what the docs list."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fastgate

SRC = Path(fastgate.__file__).resolve().parent
REPO = SRC.parent.parent

# Each package's floor: a module may import its own package or one of a lower floor; on the
# same floor, only the base modules (floor 0) and the capabilities (each other's faces). The
# faces of fastgate itself (__init__, __main__) may import anything.
FLOORS: dict[str, int] = {
    "errors": 0,
    "runtime": 0,
    "_mypyc": 0,
    "_core": 0,
    "model": 1,
    "schema": 2,
    "paths": 3,
    "tools": 4,
    "admission": 5,
    "durable": 5,
    "processes": 5,
    "permissions": 6,
    "hooks": 7,
    "pipeline": 8,
    "builtin": 9,
    "mcp": 9,
    "codemode": 9,
    "cluster": 9,
    "adapters": 9,
    "telemetry": 9,
    "sandbox": 9,
    "serve": 10,
    "cli": 11,
}
CAPABILITIES = {name for name, floor in FLOORS.items() if floor >= 9 and name != "cli"}
# The upward imports there are, each made where it is needed and nowhere else.
UPWARD = {
    # ``@tool`` recognises a ``ctx: RunContext`` parameter by its class.
    ("fastgate.tools._definition", "fastgate.pipeline.run_context"),
    # A call's file system and shell default to the built-ins' local ones, chosen lazily.
    ("fastgate.pipeline.run_context", "fastgate.builtin"),
    # Hooks from settings files run in the command sandbox where the host has one.
    ("fastgate.hooks._settings", "fastgate.sandbox"),
}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module imported, names) for every import outside ``if TYPE_CHECKING:``, at any depth,
    and every literal ``importlib.import_module("fastgate...")``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    out: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out.extend((a.name, ()) for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.append((str(node.args[0].value), ()))
    return [(m, n) for m, n in out if m == "fastgate" or m.startswith("fastgate.")]


def _targets(imported: str, names: tuple[str, ...]) -> list[str]:
    """``from fastgate import _core`` imports the module ``fastgate._core``."""
    if imported != "fastgate":
        return [imported]
    modules = {m for m, _ in _modules()}
    return [f"fastgate.{n}" for n in names if f"fastgate.{n}" in modules] or ["fastgate"]


def test_every_package_has_a_floor() -> None:
    packages = {_package(m) for m, p in _modules() if p.name == "__init__.py" and _package(m)}
    top = {_package(m) for m, p in _modules() if p.parent == SRC and p.stem not in ("__init__",)}
    assert packages | (top - {"__main__"}) <= set(FLOORS), (packages | top) - set(FLOORS)


def test_packages_import_only_downward() -> None:
    wrong = []
    for module, path in _modules():
        package = _package(module)
        if package in ("", "__main__"):
            continue  # the faces of fastgate itself
        for imported, names in _imports(path):
            for target in _targets(imported, names):
                other = _package(target)
                if other in ("", package):
                    continue
                if FLOORS[other] < FLOORS[package] or (
                    FLOORS[other] == FLOORS[package]
                    and (other in CAPABILITIES or not FLOORS[other])
                ):
                    continue
                if (module, target) in UPWARD:
                    continue
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_capabilities_use_the_core_through_package_faces() -> None:
    wrong = []
    for module, path in _modules():
        package = _package(module)
        if package not in CAPABILITIES:
            continue
        for imported, _ in _imports(path):
            other = _package(imported)
            if other in ("", package) or imported.count(".") == 1:
                continue  # fastgate itself, the own package, or a package face
            wrong.append(f"{module} -> {imported}")
    assert wrong == []


def test_each_upward_import_is_still_needed() -> None:
    present: set[tuple[str, str]] = set()
    for module, path in _modules():
        for imported, names in _imports(path):
            present.update((module, t) for t in _targets(imported, names))
    assert present >= UPWARD, UPWARD - present


def _import_alone(name: str) -> str | None:
    """The last line of the error when ``import name`` fails in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", f"import {name}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or ["(no output)"])[-1]


@pytest.mark.slow  # a fresh interpreter per module: run once in CI, on the compiled build
@pytest.mark.timeout(600)  # about 400 interpreters: 60-130 s on two busy cores
def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = [m for m, p in _modules() if p.stem != "__main__"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = dict(zip(names, pool.map(_import_alone, names), strict=True))
    failures = [f"{name}: {error}" for name, error in errors.items() if error is not None]
    assert failures == [], "\n".join(failures)


def _documented_names() -> set[str]:
    """The names docs/api.md lists as ``fastgate``'s (its table of the top-level names)."""
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("## `fastgate`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)`", section, re.M))


def test_the_exports_are_exactly_what_the_docs_list() -> None:
    if not (REPO / "docs" / "api.md").exists():
        pytest.skip("not run from a source checkout")
    exported = set(fastgate.__all__)
    documented = _documented_names()
    assert exported - documented == set(), "exported but not documented"
    assert documented - exported == set(), "documented but not exported"
    for name in exported:
        assert hasattr(fastgate, name), name
