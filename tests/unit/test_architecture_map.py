"""docs/architecture.md's layers map names every module of the tree, and names none that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _map_block() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("```\nserver/   __main__.py")
    return text[start : text.index("```\n", start + 4)]


def _modules(folder: str) -> set[str]:
    return {path.stem for path in (ROOT / folder).glob("*.py") if path.stem != "__init__"}


def _section(block: str, first: str, after: str | None) -> str:
    start = block.index(first)
    return block[start : block.index(after, start) if after else len(block)]


def test_every_server_module_is_on_the_map_and_every_named_file_exists() -> None:
    block = _map_block()
    named = set(re.findall(r"([a-z_]+)\.py\b", block))
    server = _modules("server")
    for layer in ("frontend", "commands", "ops", "ai", "store", "protocol"):
        server |= _modules(f"server/{layer}")
    assert sorted(server - named) == []  # a module the map leaves out
    assert sorted(named - server - {"__main__"}) == []  # a file the map names that is not there


def test_every_dag_and_backends_module_is_on_the_map() -> None:
    block = _map_block()
    for folder, section in (("dag", _section(block, "\ndag/", "\nbackends/")),
                            ("backends", _section(block, "\nbackends/", None))):
        words = set(re.findall(r"[a-z_]+", section))
        assert sorted(_modules(folder) - words) == [], folder
