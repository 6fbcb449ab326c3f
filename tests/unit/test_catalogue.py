"""Every error text lives in the catalogue, backends/errors.py (CONTRIBUTING.md, *One error catalogue*).

Clients match on these strings byte for byte, so a text written inline elsewhere is one nobody checks
against RedisAI's wording, and one that drifts when its twin in the catalogue is fixed. The scan reads the
source of server/, dag/ and backends/ (not imports: no torch needed) and fails on:

* an ``AIError`` / ``ProtocolError`` (or any subclass defined in the tree) built from a string literal, an
  f-string, a literal joined with ``+`` / ``%``, or ``"literal".format(...)``;
* any other string or bytes literal that reads as an error reply: it starts with an error code and a space
  (``ERR ``, ``WRONGTYPE ``, ``NOAUTH `` … optionally after ``-``). Docstrings are prose, not replies.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import backends.errors as catalogue
from backends.errors import AIError
from dag.execute import ModelWork

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("server", "dag", "backends")
CATALOGUE = ROOT / "backends" / "errors.py"
ERROR_CODES = ("ERR", "WRONGTYPE", "NOAUTH", "WRONGPASS", "NOPROTO", "EXECABORT", "NOSCRIPT", "BUSY", "LOADING",
               "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "CROSSSLOT", "NOPERM", "READONLY", "OOM", "MOVED", "ASK")
ERROR_TEXT = re.compile(rf"^-?(?:{'|'.join(ERROR_CODES)}) ")
ERROR_ROOTS = {"AIError", "ProtocolError"}


def _sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from (path for path in sorted((ROOT / package).rglob("*.py")) if path != CATALOGUE)


def _error_classes(trees: list[ast.Module]) -> set[str]:
    """AIError, ProtocolError and every class of the tree derived from them (e.g. TrackingRefused)."""
    names = set(ERROR_ROOTS)
    classes = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    grew = True
    while grew:
        grew = False
        for node in classes:
            bases = {base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in node.bases}
            if node.name not in names and bases & names:
                names.add(node.name)
                grew = True
    return names


def _is_literal_text(node: ast.expr) -> bool:
    """A message written here: a string literal, an f-string, or an expression built around one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_literal_text(node.left) or _is_literal_text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and _is_literal_text(node.func.value)
    return False


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of bare string statements (docstrings, and prose written as a statement)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _inner_fstring_parts(tree: ast.Module) -> set[int]:
    """f-string pieces after the first: ``f"{x} ERR "`` does not start with an error code."""
    return {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values[1:]}


def inline_error_texts(source: str, error_classes: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each error text written in ``source`` instead of taken from the catalogue."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in error_classes:
            message = [*node.args[:1], *(kw.value for kw in node.keywords if kw.arg == "message")]
            found += [(arg.lineno, ast.unparse(arg)) for arg in message if _is_literal_text(arg)]
    skipped = _docstrings(tree) | _inner_fstring_parts(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in skipped:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if ERROR_TEXT.match(text):
                found.append((node.lineno, text))
    return sorted(set(found))


def test_no_error_text_outside_the_catalogue() -> None:
    paths = list(_sources())
    trees = [ast.parse(path.read_text()) for path in paths]
    classes = _error_classes(trees)
    assert {"AIError", "ProtocolError", "TrackingRefused"} <= classes
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text}"
                 for path in paths for line, text in inline_error_texts(path.read_text(), classes)]
    assert not offenders, "move these texts into backends/errors.py as _MSG/_FMT constants:\n" + "\n".join(offenders)


def test_the_scan_catches_each_form() -> None:
    source = '''
def f(x):
    """ERR in a docstring is prose."""
    raise AIError("ERR plain")
    raise AIError(f"ERR {x}")
    raise ProtocolError("ERR " + x)
    raise Refused("the store said {}".format(x))
    raise AIError(message="no ERR prefix, still a literal")
    reply = b"-WRONGTYPE raw line\\r\\n"
    ok = AIError(msgs.SYNTAX_MSG), AIError(msgs.INTERNAL_MSG.format(detail=x)), f"{x} ERR inside", "-LOADING"
'''
    lines = [line for line, _ in inline_error_texts(source, ERROR_ROOTS | {"Refused"})]
    assert sorted(set(lines)) == [4, 5, 6, 7, 8, 9]


def test_catalogue_texts_are_each_written_once() -> None:
    texts: dict[str, str] = {}
    for name, value in vars(catalogue).items():
        if name.isupper() and isinstance(value, str):
            assert value not in texts, f"{name} repeats {texts[value]}"
            texts[value] = name


class _OneOutputModel:
    """A loaded model that always returns a single output."""

    input_names: list[str] = []
    output_names: list[str] = ["out"]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.zeros(1, dtype=np.float32)]


def test_a_model_with_the_wrong_output_count_answers_redisai_text() -> None:
    """It used to say ``model returned 1 outputs, expected 2``, which is not what RedisAI answers."""
    with pytest.raises(AIError) as caught:
        ModelWork(_OneOutputModel(), n_outputs=2)([])
    assert caught.value.message == "ERR Model did not generate the expected number of outputs"
