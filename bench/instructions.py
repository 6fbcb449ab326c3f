"""Instructions per request of our server at one client, counted by valgrind (callgrind): the one figure of
this VM that does not move with the hour.

Usage: python -m bench.instructions [--requests N] [--tree DIR ...] [--only NAME ...]

CPU time per request is the benchmarks' figure to compare, but on this shared 2-core VM single rounds of one
command spread from 155 to 250 µs in one morning, and a change worth 5% cannot be told from that. The number
of instructions the server runs for one request is the same run after run (±0.5% here). So each command is
sent ``requests`` times by one redis-py client to our server running under ``valgrind --tool=callgrind``
(instrumentation switched on only around those requests, after 200 to warm up), and the table gives the
instructions of the server process per request. ``--tree`` (repeatable) measures other checkouts of the
project side by side (each must be compiled: ``make compile`` there), with this tree's virtualenv.

What it does not say: how fast those instructions run (cache misses, the syscalls' cost, the store's own
work, and what 50 clients share per loop iteration), so it complements ``make bench``'s CPU figures rather
than replacing them. Under valgrind everything runs ~50 times slower, so the server runs with
``--inline-op-us 100000``: model runs stay on the loop thread as they do at full speed (the inline policy's
budget would otherwise send them to the workers). Needs valgrind (Debian package ``valgrind``).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bench.common import print_table
from bench.compiled_bench import MLP_INPUT, ONE_KIB
from tests import models
from tests.support import free_port, wait_for_port

START_TIMEOUT_S = 600.0  # torch and onnxruntime imported under valgrind
# name, command (a 1 KiB value where ONE_KIB stands)
COMMANDS: tuple[tuple[str, tuple[str | bytes, ...]], ...] = (
    ("PING", ("PING",)),
    ("SET 1 KiB", ("SET", "k", ONE_KIB)),
    ("AI.TENSORSET 1 KiB", ("AI.TENSORSET", "t", "FLOAT", "256", "BLOB", ONE_KIB)),
    ("AI.TENSORGET META BLOB", ("AI.TENSORGET", "t", "META", "BLOB")),
    ("AI.MODELEXECUTE TORCH", ("AI.MODELEXECUTE", "mt", "INPUTS", "1", "x", "OUTPUTS", "1", "yt")),
    ("AI.MODELEXECUTE ONNX", ("AI.MODELEXECUTE", "mo", "INPUTS", "1", "x", "OUTPUTS", "1", "yo")),
    ("3-op DAG", ("AI.DAGEXECUTE", "LOAD", "1", "x", "|>", "AI.MODELEXECUTE", "mt", "INPUTS", "1", "x",
                  "OUTPUTS", "1", "y", "|>", "AI.TENSORGET", "y", "META", "BLOB")),
)


@contextmanager
def counted_server(tree: Path, out: Path) -> Iterator[tuple[int, int]]:
    """Our server from ``tree`` under callgrind, instrumentation off; yields (port, valgrind's pid)."""
    port = free_port()
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
               sys.executable, "-m", "server", "--port", str(port), "--log-level", "warning",
               "--inline-op-us", "100000"]
    proc = subprocess.Popen(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_TIMEOUT_S)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(120)


def prepare(conn: redis.Redis) -> None:
    conn.set("k", ONE_KIB)
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 256, "BLOB", ONE_KIB)
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 64, "BLOB", MLP_INPUT)
    conn.execute_command("AI.MODELSTORE", "mt", "TORCH", "CPU", "BLOB", models.torch_mlp())
    conn.execute_command("AI.MODELSTORE", "mo", "ONNX", "CPU", "BLOB", models.onnx_mlp())


def instructions(tree: Path, command: tuple[str | bytes, ...], requests: int) -> float:
    """The server's instructions per request of ``command`` (its whole process: every thread)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        with counted_server(tree, out) as (port, pid):
            conn = redis.Redis(port=port, socket_timeout=300)
            prepare(conn)
            for _ in range(200):
                conn.execute_command(*command)
            _control(pid, "-i", "on")
            for _ in range(requests):
                conn.execute_command(*command)
            _control(pid, "-i", "off")
            _control(pid, "-d")
            conn.close()
        return sum(_totals(Path(name)) for name in glob.glob(f"{out}*")) / requests


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=120)


def _totals(dump: Path) -> int:
    """The instruction count of one callgrind dump (its ``totals:`` line)."""
    with dump.open() as lines:
        for line in lines:
            if line.startswith("totals:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests counted per command")
    parser.add_argument("--tree", action="append", default=[], help="another compiled checkout to measure too")
    parser.add_argument("--only", action="append", default=[], help="only the commands named so (repeatable)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench.instructions: valgrind is not installed (Debian: apt-get install valgrind); skipped")
        return
    trees = [Path(os.getcwd()), *(Path(tree).resolve() for tree in args.tree)]
    chosen = [row for row in COMMANDS if not args.only or row[0] in args.only]
    rows = []
    for name, command in chosen:
        counts = [instructions(tree, command, args.requests) for tree in trees]
        rows.append([name, *(f"{count:,.0f}" for count in counts),
                     *(f"{count / counts[0]:.2f}" for count in counts[1:])])
    print_table(f"Instructions per request, one client, our server under callgrind ({args.requests} requests)",
                ["command", *(str(tree) for tree in trees), *(f"{tree.name} / this tree" for tree in trees[1:])],
                rows)


if __name__ == "__main__":
    main()
