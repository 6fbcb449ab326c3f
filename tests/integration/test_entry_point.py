"""The installed ``redisai-server`` command, as ``make run`` starts it: from another directory than the source
tree, with the compiled hot path in use when the tree is compiled.

mypyc's shared library (``make compile``) is a top-level module beside the packages, outside what the editable
install maps; the Makefile puts the tree's root on the virtualenv's path (a .pth file) so the command finds it
from anywhere. Before that, ``make run`` stopped at once with ``No module named '<hash>__mypyc'`` on a compiled
tree, while every test (``python -m server`` from the tree's root) passed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import redis

from server.compiled import hot_module_builds
from tests.support import free_port, missing_outside_ci


def _installed_command() -> Path:
    command = Path(sys.executable).parent / "redisai-server"
    if not command.exists():
        missing_outside_ci(f"the redisai-server command in its virtualenv ({command})",
                           "this interpreter has no redisai-server command (the project is not installed)")
    return command


def _ready_line(proc: subprocess.Popen[str]) -> str:
    """The start-up log's "ready to accept connections" line, or the output of a process that stopped (a
    server that hangs instead is stopped by the suite's per-test timeout)."""
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        if "ready to accept connections" in line:
            return line
        seen.append(line)
    raise AssertionError("the server did not start:\n" + "".join(seen))


def test_the_installed_command_starts_from_any_directory_with_the_build_it_has(tmp_path: Path) -> None:
    command = _installed_command()
    port = free_port()
    proc = subprocess.Popen([str(command), "--bind", "127.0.0.1", "--port", str(port), "--log-level", "verbose"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = _ready_line(proc)
        compiled = any(build.native is not None for build in hot_module_builds())
        assert ("hot path: compiled" in ready) == compiled, ready
        conn = redis.Redis(port=port, socket_timeout=30)
        assert conn.ping()
        conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1, 2)
        assert [float(value) for value in conn.execute_command("AI.TENSORGET", "t", "VALUES")] == [1.0, 2.0]
        conn.close()
    finally:
        proc.terminate()  # (a stop it handles: its embedded store stops with it)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
