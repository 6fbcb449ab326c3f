"""Optional native build of the per-request hot path with mypyc (docs/performance.md, "Compiled hot path").

Everything in pyproject.toml describes the package; this file only adds the compiled modules, and only when
asked to, because mypyc needs the project's own dependencies importable to type-check what it compiles:

    pip install -e '.[torch,onnx,uvloop,metrics,dev]'            # pure Python, always works
    REDISAI_COMPILE=1 python setup.py build_ext --inplace         # then compile the hot path in place

(`make venv` does both.) The compiled modules are the same sources: an import finds the `.so` next to the
`.py` first. `python -m server.compiled` lists what is compiled and what is stale.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server.compiled import HOT_MODULES


def compiled_extensions() -> list[object]:
    """mypyc extensions for HOT_MODULES when REDISAI_COMPILE=1, none otherwise (a pure-Python package).

    One C file per module (multi_file), so that the C compiler can run on every core (ParallelBuildExt)."""
    if os.environ.get("REDISAI_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    paths = [module.replace(".", "/") + ".py" for module in HOT_MODULES]
    return list(mypycify(paths, opt_level="3", multi_file=True))


class ParallelBuildExt(build_ext):
    """build_ext with every C file compiled side by side, one compiler per core: mypyc's shared library is one
    extension of many C files, which plain build_ext (even with --parallel) compiles one after another."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1  # the modules' small shims: built side by side too

    def build_extensions(self) -> None:
        compile_one_by_one: Callable[..., list[str]] = self.compiler.compile
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:

            def compile_side_by_side(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
                batches = pool.map(lambda source: compile_one_by_one([source], *args, **kwargs), sources)
                return [obj for objects in batches for obj in objects]

            self.compiler.compile = compile_side_by_side
            super().build_extensions()


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": ParallelBuildExt})
