"""docs/commands.md is generated from the command table and must match it."""

from __future__ import annotations

from pathlib import Path

from server.commands.docs import render
from server.commands.table import COMMAND_TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def test_commands_doc_matches_the_table() -> None:
    assert DOC.read_text() == render(COMMAND_TABLE), "run: python -m server.commands.docs > docs/commands.md"


def test_every_command_is_in_the_doc_with_its_usage() -> None:
    text = DOC.read_text()
    for spec in COMMAND_TABLE.values():
        assert f"| `{spec.name}` |" in text
