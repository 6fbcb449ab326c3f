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

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server.compiled import HOT_MODULES


def compiled_extensions() -> list[object]:
    """mypyc extensions for HOT_MODULES when REDISAI_COMPILE=1, none otherwise (a pure-Python package)."""
    if os.environ.get("REDISAI_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    paths = [module.replace(".", "/") + ".py" for module in HOT_MODULES]
    return list(mypycify(paths, opt_level="3", multi_file=False))


setup(ext_modules=compiled_extensions())
