"""docs/quickstart.md, run against a live server: every `$ redis-cli ...` line, its output compared."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import RunningServer

ROOT = Path(__file__).resolve().parents[2]


def _session() -> list[tuple[str, list[str]]]:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    block = text.split("```console\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def _matches(expected: list[str], got: list[str]) -> bool:
    """Equal line by line; ``<...>`` in the doc stands for a value that changes from run to run."""
    if len(expected) != len(got):
        return False
    for want, have in zip(expected, got, strict=True):
        pattern = "^" + re.sub(r"<[^>]+>", ".+", re.escape(want).replace(r"\<", "<").replace(r"\>", ">")) + "$"
        if not re.match(pattern, have):
            return False
    return True


def test_quickstart_session(server: RunningServer, tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "prep.torchscript", tmp_path)
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_models.py"), str(tmp_path)], check=True,
                   capture_output=True, timeout=120)
    steps = _session()
    assert len(steps) >= 15
    for command, expected in steps:
        assert command.startswith("redis-cli ")
        local = command.replace("redis-cli ", f"redis-cli --no-raw -p {server.port} ", 1)
        result = subprocess.run(["bash", "-c", local], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        got = result.stdout.rstrip("\n").split("\n")
        assert _matches(expected, got), f"{command}\nexpected:\n" + "\n".join(expected) + "\ngot:\n" + result.stdout
