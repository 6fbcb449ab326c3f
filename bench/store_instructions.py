"""The store's instructions per request: what each AI command costs the valkey-server behind our server, counted
by valgrind the way ``bench.instructions`` counts ours.

Usage: python -m bench.store_instructions [--requests N] [--clients N] [--tree DIR ...] [--only NAME ...]

Why it matters: one single-threaded store serves every server process in front of it (``--workers N``, or
several servers), so its work per request bounds what they reach together; and at one client it sits in each
request's path (a MODELEXECUTE's one round trip is its check-and-write Lua script, server/store/atomic.py).
Each tree's server runs at full speed (compiled: ``make compile`` there) in front of a fresh valkey-server (the
embedded store's binary) under ``valgrind --tool=callgrind``, with instrumentation on only around the counted
requests, sent as ``bench.instructions`` sends them. Needs valgrind (Debian package ``valgrind``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bench.common import our_server
from bench.instructions import (
    COMMANDS,
    START_TIMEOUT_S,
    Commands,
    arguments,
    callgrind_prefix,
    count_requests,
    prepare,
    trees_side_by_side,
    valgrind_missing,
)
from server.store.process import find_store_binary
from tests.support import free_port, wait_for_port


@contextmanager
def counted_store(workdir: Path, out: Path) -> Iterator[tuple[str, int]]:
    """A valkey-server under callgrind, instrumentation off; yields its URL and valgrind's pid."""
    port = free_port()
    command = [*callgrind_prefix(out), find_store_binary(""), "--port", str(port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", str(workdir)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_TIMEOUT_S)
        yield f"redis://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(120)


def store_instructions(tree: Path, commands: Commands, requests: int, clients: int = 1) -> list[float]:
    """The store's instructions per request of each of ``commands`` sent through ``tree``'s server (one start
    of each)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        with counted_store(Path(scratch), out) as (url, pid), \
                our_server("--redis-url", url, tree=str(tree)) as port:
            conn = redis.Redis(port=port, socket_timeout=300)
            prepare(conn)
            counted = [count_requests(conn, port, pid, out, command, requests, clients) for command in commands]
            conn.close()
        return counted


def main() -> None:
    args = arguments(__doc__ or "", cluster=False)
    if valgrind_missing("bench.store_instructions"):
        return
    trees = [Path(os.getcwd()), *(Path(tree).resolve() for tree in args.tree)]
    chosen = tuple(row for row in COMMANDS if not args.only or row[0] in args.only)
    trees_side_by_side(trees, chosen, args.requests, args.clients, count=store_instructions,
                       whose="the valkey-server behind our server")


if __name__ == "__main__":
    main()
