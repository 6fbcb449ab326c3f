"""The compiled hot path's bookkeeping (server/compiled.py) and the pure-Python switch (backends/pure_python.py).

A `.so` beside a module's `.py` is what Python imports; these tests lay out such files in a scratch tree to
check what is called compiled, stale or pure, and run real imports in a child process to check that
REDISAI_PURE_PYTHON=1 loads the sources of whatever this checkout has compiled.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from server.compiled import HOT_MODULES, hot_module_builds

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _lay_out(root: Path, compiled: set[str], checkout: bool) -> None:
    """Every hot module's source under ``root``; a shim `.so` for those in ``compiled`` and mypyc's shared
    library at the top; setup.py when ``checkout``."""
    for name in HOT_MODULES:
        source = root.joinpath(*name.split(".")).with_suffix(".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        os.utime(source, (1000, 1000))
        if name in compiled:
            shim = source.with_name(source.stem + SUFFIX)
            shim.write_bytes(b"")
            os.utime(shim, (1000, 1000))
    (root / f"abc__mypyc{SUFFIX}").write_bytes(b"")
    os.utime(root / f"abc__mypyc{SUFFIX}", (2000, 2000))
    if checkout:
        (root / "setup.py").write_text("")


def _states(root: Path) -> dict[str, str]:
    return {build.name: "pure" if build.native is None else ("stale" if build.stale else "compiled")
            for build in hot_module_builds(str(root))}


def test_a_source_edited_after_the_build_is_stale_and_an_unbuilt_one_pure(tmp_path: Path) -> None:
    first, second, third = HOT_MODULES[:3]
    _lay_out(tmp_path, {first, second}, checkout=True)
    edited = tmp_path.joinpath(*second.split(".")).with_suffix(".py")
    os.utime(edited, (3000, 3000))  # after the shared library (2000), though the shim is older still
    states = _states(tmp_path)
    assert (states[first], states[second], states[third]) == ("compiled", "stale", "pure")


def test_an_installed_package_is_never_stale(tmp_path: Path) -> None:
    """A wheel's files get the installer's times: without setup.py beside the packages, no judgement."""
    _lay_out(tmp_path, set(HOT_MODULES), checkout=False)
    os.utime(tmp_path.joinpath(*HOT_MODULES[0].split(".")).with_suffix(".py"), (3000, 3000))
    assert set(_states(tmp_path).values()) == {"compiled"}


def _imported_file(module: str, pure: bool) -> str:
    env = {key: value for key, value in os.environ.items() if key != "REDISAI_PURE_PYTHON"}
    if pure:
        env["REDISAI_PURE_PYTHON"] = "1"
    code = f"import {module} as m; print(m.__file__)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=60, cwd=Path(__file__).parents[2]).stdout.strip()


def test_pure_python_switch_imports_the_sources_of_every_hot_module() -> None:
    builds = {build.name: build for build in hot_module_builds()}
    for module in ("server.frontend.connection", "server.store.upstream", "backends.tensor"):
        assert _imported_file(module, pure=True) == builds[module].source
        as_built = _imported_file(module, pure=False)
        assert as_built == (builds[module].native or builds[module].source)


def _none_checks_after_an_await(function: ast.AsyncFunctionDef) -> list[str]:
    """``self.x is None`` tests of an attribute already tested before an await in the same coroutine: mypy
    keeps the first test's narrowing across the await, and the compiled code trusts it (a connection made
    meanwhile by another coroutine was once taken for None there: server/store/cache.py, redis.py)."""
    events: list[tuple[int, int, str]] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Await | ast.AsyncWith):
            events.append((node.lineno, node.col_offset, ""))
        elif (isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Is | ast.IsNot)
              and isinstance(node.left, ast.Attribute) and isinstance(node.left.value, ast.Name)
              and node.left.value.id == "self" and isinstance(node.comparators[0], ast.Constant)
              and node.comparators[0].value is None):
            events.append((node.lineno, node.col_offset, node.left.attr))
    checked: set[str] = set()
    awaited: set[str] = set()
    found = []
    for line, _column, attribute in sorted(events):
        if not attribute:
            awaited |= checked
        elif attribute in awaited:
            found.append(f"{function.name}:{line}: self.{attribute}")
        else:
            checked.add(attribute)
    return found


def _hot_module_trees() -> Iterator[tuple[str, ast.Module]]:
    """Each compiled module's name and parsed source."""
    root = Path(__file__).parents[2]
    for name in HOT_MODULES:
        yield name, ast.parse(root.joinpath(*name.split(".")).with_suffix(".py").read_text())


def test_no_compiled_coroutine_tests_an_attribute_for_none_again_after_an_await() -> None:
    found = []
    for name, tree in _hot_module_trees():
        for function in ast.walk(tree):
            if isinstance(function, ast.AsyncFunctionDef):
                found += [f"{name}.{where}" for where in _none_checks_after_an_await(function)]
    assert not found, f"read the attribute through a call after the await instead: {found}"


def _final_float_tuples(tree: ast.Module) -> list[str]:
    """Module-level ``NAME: Final = (...)`` tuples with a float in them: mypyc (2.4) makes such a constant a C
    struct whose "was it set" check is generated backwards, so every read of it inside a compiled function
    raised ``NameError: value for final name ... was not set`` (the embedded store's restart delays, found by
    test_embedded_store's store-killed test)."""
    found = []
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and "Final" in ast.unparse(node.annotation) and isinstance(node.value, ast.Tuple)
                and any(isinstance(item, ast.Constant) and isinstance(item.value, float)
                        for item in node.value.elts)):
            found.append(f"{node.target.id} (line {node.lineno})")
    return found


def test_no_compiled_module_has_a_final_tuple_of_floats() -> None:
    found = [f"{name}.{where}" for name, tree in _hot_module_trees() for where in _final_float_tuples(tree)]
    assert not found, f"leave these without Final (a module global): {found}"


def test_the_final_float_tuple_check_finds_one() -> None:
    tree = ast.parse("from typing import Final\nDELAYS: Final = (0.05, 1, 2.0)\nCOUNTS: Final = (1, 2)\n")
    assert _final_float_tuples(tree) == ["DELAYS (line 2)"]


def _classes_and_bases(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    """(class, base) of each class ``module`` defines, both as ``module.Name``: a base imported by name from a
    module of this project, or defined in ``module`` itself."""
    imported = {alias.asname or alias.name: f"{node.module}.{alias.name}" for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    own = {node.name for node in classes}
    for node in classes:
        for base in node.bases:
            name = ast.unparse(base).split("[")[0]
            if name in own:
                yield f"{module}.{node.name}", f"{module}.{name}"
            elif name in imported:
                yield f"{module}.{node.name}", imported[name]


def test_every_subclass_of_a_compiled_class_is_compiled_too() -> None:
    """An interpreted class cannot subclass a compiled one (a TypeError when its module is imported), so a
    module that subclasses a class of HOT_MODULES is in HOT_MODULES too."""
    root = Path(__file__).parents[2]
    hot = set(HOT_MODULES)
    found = []
    for package in ("server", "dag", "backends"):
        for source in sorted(root.joinpath(package).rglob("*.py")):
            module = ".".join(source.relative_to(root).with_suffix("").parts)
            if module in hot:
                continue
            for cls, base in _classes_and_bases(ast.parse(source.read_text()), module):
                if base.rpartition(".")[0] in hot:
                    found.append(f"{cls} <- {base}")
    assert not found, f"compile these modules too, or their bases not: {found}"
