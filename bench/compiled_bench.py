"""The compiled hot path against the same tree's pure-Python path, side by side in one run.

Usage: python -m bench.compiled_bench [--requests N] [--rounds R]

Two servers on the embedded store start from this tree: one as built (the mypyc-compiled modules of
server/compiled.py, `make compile`), one with REDISAI_PURE_PYTHON=1 (the same sources, interpreted). Each
command runs on both, alternating, ``rounds`` times (50 clients, redis-benchmark); the table gives our server
CPU µs per request (median of the rounds) for each and their ratio; then one client's median MODELEXECUTE
round trip (redis-py) on each.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

import numpy as np
import redis

from bench.common import Target, measure, median_ms, our_server, print_table, stack, target
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
    ("AI.MODELEXECUTE TORCH BATCHSIZE 32", ("AI.MODELEXECUTE", "mb", "INPUTS", "1", "x", "OUTPUTS", "1", "yb"),
     None),
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
    conn.execute_command("AI.MODELSTORE", "mb", "TORCH", "CPU", "BATCHSIZE", 32, "BLOB", models.torch_mlp())
    conn.close()


def one_client_p50_us(port: int, key: str, calls: int) -> float:
    """The median round trip of AI.MODELEXECUTE from one redis-py client (after 200 to warm up)."""
    conn = redis.Redis(port=port)
    command = ("AI.MODELEXECUTE", key, "INPUTS", 1, "x", "OUTPUTS", 1, f"one_{key}")
    for _ in range(200):
        conn.execute_command(*command)
    p50 = median_ms(lambda: conn.execute_command(*command), calls) * 1000
    conn.close()
    return p50


def cpu_us(where: Target, args: Sequence[str], stdin: bytes | None, requests: int) -> float:
    return measure(where, args, requests, stdin=stdin).cpu_us


def run(requests: int, rounds: int, calls: int) -> None:
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
        latency = []
        for key, label in (("mt", "TORCH"), ("mo", "ONNX")):
            fast, slow = one_client_p50_us(compiled.port, key, calls), one_client_p50_us(pure.port, key, calls)
            latency.append([f"one client, MODELEXECUTE {label} p50 us", f"{slow:.0f}", f"{fast:.0f}",
                            f"{fast / slow:.2f}"])
    print_table(f"Compiled hot path ({describe_build()}) vs pure Python: our server CPU us per request, "
                f"50 clients, {requests} requests, median of {rounds} alternating rounds",
                ["command", "pure Python", "compiled", "compiled / pure"], rows + latency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="one-client calls per latency figure")
    arguments = parser.parse_args()
    run(arguments.requests, arguments.rounds, arguments.calls)


if __name__ == "__main__":
    main()
