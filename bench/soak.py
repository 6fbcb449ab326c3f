"""The long versions of the hostile-input and fault tests, as one table (``make soak``).

Usage: python -m bench.soak [--cases 100000] [--frames 100000] [--clients 100] [--seconds 60]
                            [--requests 100000] [--seed 16]

Each part runs against our server as its own process (embedded store), as ``make run`` starts it:

* fuzz: ``--cases`` random AI.* commands (tests/fuzz.py: wrong dtypes, shapes, dims up to 2^63, corrupt blobs
  and tensor headers, broken DAG grammar) from one client while a witness client checks its own model run every
  1,000 cases; then ``--frames`` random or broken RESP frames, one connection each. A violation is an ``internal
  error`` reply or a lost connection.
* mixed load: ``--clients`` clients for ``--seconds`` seconds, each doing every kind of write of tests/fuzz.py
  ``WRITES`` (AI.TENSORSET, SET, DAG PERSIST of a tensor, of a model's and of a script's output) under keys of
  its own; afterwards every acknowledged write is read back and compared.
* RSS: the server's resident memory before and after ``--requests`` more of those writes (one pipelining
  client), after a warm-up of a tenth as many.
* store restart: a server with ``--dir``; its store process is SIGKILLed while 8 clients write; the server
  starts it again; every acknowledged write is read back.

The load generator is Python threads on the same 2 cores as the server: the figures say what held, not how fast
the server is (``make bench`` measures that).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import redis

from bench.common import our_server, print_table, target
from bench.rss_bench import rss_bytes
from tests.fuzz import (
    FUZZ_SCRIPT,
    WRITES,
    Violation,
    acknowledged,
    ai_command,
    check_reply,
    check_witness,
    resp_frame,
    store_fixtures,
    store_witness,
)

RESTART_WRITERS = 8
LOST_SHOWN = 5


@dataclass
class Row:
    """One line of the table: what ran, what was counted, and whether it held."""

    check: str
    load: str
    figures: str
    held: bool

    def cells(self) -> list[str]:
        return [self.check, self.load, self.figures, "ok" if self.held else "FAILED"]


def _client(port: int, timeout: float = 30) -> redis.Redis:
    """A RESP2 client (the replies tests/fuzz.py compares are RESP2's)."""
    return redis.Redis(port=port, socket_timeout=timeout, protocol=2)


def fuzz_commands(port: int, cases: int, seed: int) -> Row:
    conn, witness = _client(port, 30), _client(port, 30)
    blobs = store_fixtures(conn)
    store_witness(witness)
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    violations: list[str] = []
    for case in range(cases):
        argv = ai_command(rng, blobs, FUZZ_SCRIPT)
        try:
            reply = check_reply(conn, argv)
            counts["errors" if isinstance(reply, redis.ResponseError) else "replies"] += 1
        except Violation as exc:
            violations.append(str(exc))
            conn = _client(port, 30)
        if case % 1000 == 0:
            check_witness(witness, case)
            store_fixtures(conn)
    check_witness(witness, cases)
    shown = "; ".join(violations[:LOST_SHOWN])
    return Row("fuzz: AI commands", f"{cases:,} cases, seed {seed}",
               f"{counts['replies']:,} replies, {counts['errors']:,} errors, {len(violations)} violations {shown}",
               not violations)


def fuzz_frames(port: int, frames: int, seed: int) -> Row:
    import hiredis

    rng = random.Random(seed)
    witness = _client(port, 30)
    witness.set("soak:safe", "1")
    violations, answered = 0, 0
    for case in range(frames):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(resp_frame(rng))
            sock.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        reader = hiredis.Reader()
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            answered += 1
            violations += isinstance(reply, hiredis.ReplyError) and "internal error" in str(reply)
        if case % 1000 == 0 and witness.get("soak:safe") != b"1":
            violations += 1
    return Row("fuzz: RESP frames", f"{frames:,} frames, one connection each",
               f"{answered:,} replies, {violations} violations", violations == 0 and witness.ping())


def _write_loop(port: int, prefix: str, until: Callable[[int], bool], written: list[int], errors: Counter[str]) -> None:
    """Write every kind of ``WRITES`` in turn under ``prefix`` + i until ``until(i)``; acknowledged i in ``written``."""
    conn = _client(port, 60)
    i = 0
    while not until(i):
        try:
            acknowledged(WRITES[i % len(WRITES)][0](conn, f"{prefix}{i}", i))
            written.append(i)
        except redis.ResponseError as exc:
            errors[str(exc)[:60]] += 1
        except redis.ConnectionError as exc:
            errors[f"connection: {exc}"[:60]] += 1
            conn = _client(port, 60)
        i += 1


def _lost(port: int, prefix: str, written: list[int]) -> list[str]:
    """The keys of acknowledged writes that do not read back as written."""
    conn = _client(port, 120)
    lost = []
    for start in range(0, len(written), 1000):
        chunk = written[start : start + 1000]
        pipe = conn.pipeline(transaction=False)
        for i in chunk:
            WRITES[i % len(WRITES)][1](pipe, f"{prefix}{i}")
        for i, value in zip(chunk, pipe.execute(raise_on_error=False), strict=True):
            if value != WRITES[i % len(WRITES)][2](i):
                lost.append(f"{prefix}{i}")
    return lost


def mixed_load(port: int, clients: int, seconds: float) -> Row:
    store_witness(_client(port))
    deadline = time.monotonic() + seconds
    written: list[list[int]] = [[] for _ in range(clients)]
    errors: Counter[str] = Counter()
    threads = [threading.Thread(target=_write_loop, args=(port, f"load:{c}:", lambda _i: time.monotonic() > deadline,
                                                          written[c], errors)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    lost = [key for c in range(clients) for key in _lost(port, f"load:{c}:", written[c])]
    total = sum(len(w) for w in written)
    return Row("mixed load", f"{clients} clients x {seconds:.0f} s",
               f"{total:,} writes acknowledged ({total / seconds:,.0f}/s), {sum(errors.values())} errors "
               f"{dict(errors.most_common(2))}, {len(lost)} lost {lost[:LOST_SHOWN]}", not lost and not errors)


def rss_growth(port: int, requests: int) -> Row:
    conn = _client(port, 60)
    store_witness(conn)
    pid = target("ours", port).pid

    def load(count: int, prefix: str) -> None:
        pipe = conn.pipeline(transaction=False)
        for i in range(count):
            WRITES[i % len(WRITES)][0](pipe, f"{prefix}{i % 1000}", i)  # 1,000 keys, rewritten: the store stays small
            if i % 100 == 99:
                pipe.execute()
        pipe.execute()

    load(requests // 10, "rss:")
    before = rss_bytes(pid)
    load(requests, "rss:")
    after = rss_bytes(pid)
    growth = 100 * (after - before) / before
    return Row("RSS", f"{requests:,} writes after a {requests // 10:,} warm-up",
               f"{before / 1048576:.1f} -> {after / 1048576:.1f} MiB ({growth:+.2f}%)", growth < 5)


def store_restart(port: int) -> Row:
    store_witness(_client(port))
    store_pid = target("ours", port).store_pid
    written: list[list[int]] = [[] for _ in range(RESTART_WRITERS)]
    errors: Counter[str] = Counter()
    done = threading.Event()
    threads = [threading.Thread(target=_write_loop, args=(port, f"restart:{c}:", lambda _i: done.is_set(), written[c],
                                                          errors)) for c in range(RESTART_WRITERS)]
    for thread in threads:
        thread.start()
    _wait(lambda: sum(map(len, written)) >= 2000)
    os.kill(store_pid, signal.SIGKILL)
    killed, at_kill = time.monotonic(), sum(map(len, written))
    _wait(lambda: target("ours", port).store_pid not in (0, store_pid))
    back = time.monotonic() - killed
    _wait(lambda: sum(map(len, written)) >= at_kill + 2000)
    done.set()
    for thread in threads:
        thread.join(120)
    lost = [key for c in range(RESTART_WRITERS) for key in _lost(port, f"restart:{c}:", written[c])]
    unexpected = {text: n for text, n in errors.items() if not text.startswith(("backing store unavailable",
                                                                                 "LOADING"))}
    total = sum(map(len, written))
    return Row("store restart", f"SIGKILL under {RESTART_WRITERS} writers (--dir)",
               f"{total:,} writes acknowledged, store back after {back:.2f} s, {sum(errors.values())} "
               f"'unavailable' errors meanwhile, {len(lost)} lost {lost[:LOST_SHOWN]}", not lost and not unexpected)


def _wait(check: Callable[[], bool], timeout: float = 120.0) -> None:
    """Until ``check()`` holds (an error reply, e.g. INFO while the store is away, counts as not yet)."""
    deadline = time.monotonic() + timeout
    while not _holds(check):
        if time.monotonic() > deadline:
            raise TimeoutError("the soak waited too long for its condition")
        time.sleep(0.05)


def _holds(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except redis.RedisError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100_000, help="random AI commands")
    parser.add_argument("--frames", type=int, default=100_000, help="random RESP frames")
    parser.add_argument("--clients", type=int, default=100, help="clients of the mixed load")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the mixed load")
    parser.add_argument("--requests", type=int, default=100_000, help="writes over which RSS growth is measured")
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    started = time.monotonic()
    rows: list[Row] = []
    with our_server() as port:
        rows.append(fuzz_commands(port, args.cases, args.seed))
        rows.append(fuzz_frames(port, args.frames, args.seed))
    with our_server() as port:
        rows.append(mixed_load(port, args.clients, args.seconds))
    with our_server() as port:
        rows.append(rss_growth(port, args.requests))
    with tempfile.TemporaryDirectory() as data, our_server("--dir", data) as port:
        rows.append(store_restart(port))
    print_table(f"soak ({time.monotonic() - started:.0f} s)", ["check", "load", "figures", "result"],
                [row.cells() for row in rows])
    return 0 if all(row.held for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
