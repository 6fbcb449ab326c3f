"""`REDISAI_PURE_PYTHON=1`: import this project's modules from their `.py` sources even where compiled.

    REDISAI_PURE_PYTHON=1 python -m pytest -q tests/unit      # the pure path of a compiled tree

A compiled build (setup.py, server/compiled.py) leaves a `.so` beside each hot module, and Python prefers it.
The pure-Python path must keep working (it is what runs wherever mypyc cannot build), so the test suite runs
both; this finder is how one tree runs the other. It is installed by `backends/__init__.py`, which every
import of the project passes through first (server/__init__.py and dag/__init__.py import it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from types import ModuleType

PACKAGES = ("server", "backends", "dag")


class SourceFirstFinder:
    """Finds the project's modules with source loaders only, so a `.so` beside the `.py` is never picked."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        """The `.py` (or package `__init__.py`) spec of one of PACKAGES' modules; None for anything else."""
        if fullname.partition(".")[0] not in PACKAGES:
            return None
        for directory in path if path is not None else sys.path:
            base = os.path.join(directory or os.getcwd(), fullname.rpartition(".")[2])
            package_init = os.path.join(base, "__init__.py")
            if os.path.isfile(package_init):
                return spec_from_file_location(fullname, package_init, submodule_search_locations=[base])
            if os.path.isfile(base + ".py"):
                return spec_from_file_location(fullname, base + ".py")
        return None


def install_if_asked() -> None:
    """Put the finder first on sys.meta_path when REDISAI_PURE_PYTHON=1 (once per process)."""
    if os.environ.get("REDISAI_PURE_PYTHON") != "1":
        return
    if not any(isinstance(finder, SourceFirstFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceFirstFinder())
