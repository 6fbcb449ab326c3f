"""The compiled hot path against the same tree's pure-Python path, side by side in one run.

Usage: python -m bench.compiled_bench [--requests N] [--rounds R]

Two servers on the embedded store start from this tree: one as built (the mypyc-compiled modules of
server/compiled.py, `make compile`), one with REDISAI_PURE_PYTHON=1 (the same sources, interpreted). Each
command runs on both, alternating, ``rounds`` times (50 clients, redis-benchmark); the table gives our server
CPU µs per request (median of the rounds) for each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

import numpy as np
import redis

from bench.common import Target, measure, our_server, print_table, stack, target
from server.compiled import describe_build
from tests import models

ONE_KIB = b"ABCD" * 256  # no NUL bytes: redis-benchmark -x reads its argument as a C string
MLP_INPUT = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32).tobytes()

# name, redis-benchmark arguments, what the last argument is (read through -x), or None
COMMANDS: tuple[tuple[str, tuple[str, ...], bytes | None], ...] = (
    ("PING", ("PING",), None),
    ("SET 1 KiB", ("SET", "k"), ONE_KIB),
    ("GET 1 KiB", ("GET", "k"), None),
    ("AI.TENSORSET 1 KiB", ("AI.TENSORSET", "t", "FLOAT", "256", "BLOB"), ONE_KIB),
    ("AI.TENSORGET META BLOB", ("AI.TENSORGET", "t", "META", "BLOB"), None),
    ("AI.MODELEXECUTE TORCH", ("AI.MODELEXECUTE", "mt", "INPUTS", "1", "x", "OUTPUTS", "1", "yt"), None),
    ("AI.MODELEXECUTE ONNX", ("AI.MODELEXECUTE", "mo", "INPUTS", "1", "x", "OUTPUTS", "1", "yo"), None),
    ("3-op DAG", ("AI.DAGEXECUTE", "LOAD", "1", "x", "|>", "AI.MODELEXECUTE", "mo", "INPUTS", "1", "x",
                  "OUTPUTS", "1", "y", "|>", "AI.TENSORGET", "y", "META"), None),
)


def prepare(port: int) -> None:
    """The keys every command reads: a 1 KiB string, a tensor, the MLP's input and both MLPs."""
    conn = redis.Redis(port=port)
    conn.set("k", ONE_KIB)
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 256, "BLOB", ONE_KIB)
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 64, "BLOB", MLP_INPUT)
    conn.execute_command("AI.MODELSTORE", "mt", "TORCH", "CPU", "BLOB", models.torch_mlp())
    conn.execute_command("AI.MODELSTORE", "mo", "ONNX", "CPU", "BLOB", models.onnx_mlp())
    conn.close()


def cpu_us(where: Target, args: Sequence[str], stdin: bytes | None, requests: int) -> float:
    return measure(where, args, requests, stdin=stdin).cpu_us


def run(requests: int, rounds: int) -> None:
    with stack() as servers:
        compiled = target("compiled", servers.enter_context(our_server()))
        pure = target("pure", servers.enter_context(our_server(env={"REDISAI_PURE_PYTHON": "1"})))
        for where in (compiled, pure):
            prepare(where.port)
        rows = []
        for name, args, stdin in COMMANDS:
            cpu_us(compiled, args, stdin, requests // 10)  # warm-up
            cpu_us(pure, args, stdin, requests // 10)
            pairs = [(cpu_us(compiled, args, stdin, requests), cpu_us(pure, args, stdin, requests))
                     for _ in range(rounds)]
            fast, slow = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
            rows.append([name, f"{slow:.1f}", f"{fast:.1f}", f"{fast / slow:.2f}"])
    print_table(f"Compiled hot path ({describe_build()}) vs pure Python: our server CPU us per request, "
                f"50 clients, {requests} requests, median of {rounds} alternating rounds",
                ["command", "pure Python", "compiled", "compiled / pure"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    run(arguments.requests, arguments.rounds)


if __name__ == "__main__":
    main()
