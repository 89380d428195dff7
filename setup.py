"""Build the compiled core.

Each hot-path module has ONE source, ``src/fastgate/_core/_<name>_py.py`` (plain Python that
also runs uncompiled), plus C type declarations in ``_<name>_c.pxd``. At build time the source is
copied next to its ``.pxd`` under ``build/cysrc`` as ``_<name>_c.py`` and compiled by Cython into
the extension ``fastgate._core._<name>_c``. Pure and compiled therefore cannot drift apart.
The exceptions are ``_core/_openat2.pyx``, a system call Python has no binding for (the pure
build takes another route to the same answers), ``_core/_construct.pyx``, which lets the
compiled ``ExecutionContext`` be called as fast as a compiled function, and ``_core/_links.pyx``,
a file's link count without a ``stat_result``. The pipeline's modules
are compiled by mypyc as they are (``fastgate._core.PIPELINE_MODULES``).

Environment switches (the same names are read again at import time):
- ``FASTGATE_NO_EXTENSIONS=1``: build nothing, install the pure-Python core only.
- ``FASTGATE_REQUIRE_EXTENSIONS=1``: a failed compile fails the build instead of falling back.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
CORE = ROOT / "src" / "fastgate" / "_core"
CYSRC = ROOT / "build" / "cysrc"
CORE_MODULES = ("_wait", "_gate", "_sched", "_locks", "_validate", "_task")


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _stage_sources() -> list[str]:
    """Copy each pure source beside its .pxd as the module the extension will be named after."""
    target = CYSRC / "fastgate" / "_core"
    target.mkdir(parents=True, exist_ok=True)
    for init in (CYSRC / "fastgate" / "__init__.py", target / "__init__.py"):
        init.write_text("")
    sources = []
    for name in CORE_MODULES:
        py = target / f"{name}_c.py"
        shutil.copyfile(CORE / f"{name}_py.py", py)
        shutil.copyfile(CORE / f"{name}_c.pxd", target / f"{name}_c.pxd")
        sources.append(str(py.relative_to(ROOT)))
    return sources


def _extensions() -> list[object]:
    if _flag("FASTGATE_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if _flag("FASTGATE_REQUIRE_EXTENSIONS"):
            raise
        return []
    from setuptools import Extension

    directives = {
        "language_level": "3",
        "annotation_typing": False,
        "boundscheck": False,
        "wraparound": False,
        "initializedcheck": False,
        "cdivision": True,
    }
    staged = [
        Extension(f"fastgate._core.{Path(src).stem}", [src], extra_compile_args=["-O2"])
        for src in _stage_sources()
    ]
    # The openat2 probe, the class-call router and the link count have no pure twin (the pure
    # build has no use for them): each its own .pyx, its generated C kept out of the source tree.
    own = [
        Extension(
            f"fastgate._core.{name}",
            [str((CORE / f"{name}.pyx").relative_to(ROOT))],
            extra_compile_args=["-O2"],
        )
        for name in ("_openat2", "_construct", "_links")
    ]
    return (
        _pipeline_extensions()
        + list(cythonize(staged, compiler_directives=directives, quiet=True))
        + list(cythonize(own, compiler_directives=directives, quiet=True, build_dir=str(CYSRC)))
    )


def _pipeline_modules() -> tuple[str, ...]:
    """``fastgate._core.PIPELINE_MODULES``, read from its source (importing the package here
    would need its dependencies): one list for the build and the runtime switch."""
    for node in ast.parse((CORE / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "PIPELINE_MODULES"
        ]:
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("PIPELINE_MODULES not found in src/fastgate/_core/__init__.py")


def _pipeline_extensions() -> list[object]:
    try:
        from mypyc.build import mypycify
    except ImportError:
        if _flag("FASTGATE_REQUIRE_EXTENSIONS"):
            raise
        return []
    sources = [f"src/fastgate/{name.replace('.', '/')}.py" for name in _pipeline_modules()]
    # -O2 rather than mypyc's usual -O3, and hidden symbols so calls between the pipeline's own
    # functions skip the PLT: measured 4-6% faster per call (docs/decisions.md).
    extensions = list(mypycify(sources, opt_level="2", group_name="fastgate_pipeline"))
    for extension in extensions:
        # (the extensions share one list of arguments: give each its own)
        extension.extra_compile_args = [*extension.extra_compile_args, "-fvisibility=hidden"]
    return extensions


class OptionalBuildExt(build_ext):
    """Fall back to the pure core when no compiler works, unless extensions are required."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # one compiler per core: the pipeline's group is the longest job
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception:
            if _flag("FASTGATE_REQUIRE_EXTENSIONS"):
                raise
            print("fastgate: compiled core not built; the pure-Python core will be used")
        self.build_launcher()

    def build_launcher(self) -> None:
        """``fastgate-launcher`` beside ``fastgate/processes`` (Linux): the compiled twin of
        ``_launcher.py``, which starts in a millisecond where the pure one needs an interpreter.
        Built with the extensions' compiler, so not under ``FASTGATE_NO_EXTENSIONS``."""
        compiler = self.compiler
        if not sys.platform.startswith("linux") or not hasattr(compiler, "link_executable"):
            return
        source = "src/fastgate/processes/_launcher.c"
        target = os.path.dirname(self.get_ext_fullpath("fastgate.processes._launcher"))
        try:
            objects = compiler.compile([source], output_dir=self.build_temp, extra_postargs=["-O2"])
            try:
                # Static where the C library allows it: no dynamic loader on every command.
                compiler.link_executable(
                    objects, "fastgate-launcher", output_dir=target, extra_postargs=["-static"]
                )
            except Exception:
                compiler.link_executable(objects, "fastgate-launcher", output_dir=target)
        except Exception:
            if _flag("FASTGATE_REQUIRE_EXTENSIONS"):
                raise
            print("fastgate: could not compile the process launcher; the pure one will be used")

    def build_extension(self, ext: object) -> None:
        try:
            super().build_extension(ext)
        except Exception:
            if _flag("FASTGATE_REQUIRE_EXTENSIONS"):
                raise
            print(f"fastgate: could not compile {getattr(ext, 'name', ext)}; using pure Python")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
