"""Stored-graph benchmarks: a compiled graph against the same graph interpreted and the same ops as a DAG.

Usage: python -m bench.graph_bench [--requests N] [--clients N] [--calls N] [--tree DIR]

1. A 10-op chain (x → double → double … → y) and a 10-op fan-out/fan-in (five doubles of x, a tree of four
   adds, a last double) of tiny TorchScript ops on a 1x4 tensor: 50 clients (``--clients``; redis-benchmark) of
   AI.GRAPHEXECUTE (COMPILED), AI.GRAPHEXECUTE … MODE INTERPRETED, and the same ops sent as an ad-hoc
   AI.DAGEXECUTE LOAD … PERSIST …: requests/s, p50/p99 and the server CPU µs per run (/proc/PID/stat), with
   the ratio of each to COMPILED.
2. A graph with two independent slow branches (tests/models.py torch_slow, 256x256 input) whose models sit on
   CPU:0 and CPU:1, against the same graph with both on CPU, calls interleaved: median wall time and the
   speedup. It needs two idle cores: another process busy on the machine shows as a smaller speedup.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import redis

from bench.common import (
    CELL_NAMES,
    Measured,
    measure,
    median_ms,
    our_server,
    print_table,
    store_two_device_models,
    target,
)
from tests import models

Op = list[str]


def _model_op(model: str, inputs: list[str], output: str) -> Op:
    return ["AI.MODELEXECUTE", model, "INPUTS", str(len(inputs)), *inputs, "OUTPUTS", "1", output]


def chain_ops() -> list[Op]:
    """x → t1 → … → t9 → y, each a double."""
    names = ["x", *(f"t{i}" for i in range(1, 10)), "y"]
    return [_model_op("dbl", [names[i]], names[i + 1]) for i in range(10)]


def fan_ops() -> list[Op]:
    """Five doubles of x (fan-out), four adds of them (fan-in), one last double."""
    ops = [_model_op("dbl", ["x"], f"b{i}") for i in range(1, 6)]
    ops += [_model_op("add", ["b1", "b2"], "c1"), _model_op("add", ["b3", "b4"], "c2"),
            _model_op("add", ["c1", "c2"], "c3"), _model_op("add", ["c3", "b5"], "c4")]
    return [*ops, _model_op("dbl", ["c4"], "y")]


def piped(ops: list[Op]) -> list[str]:
    return [part for op in ops for part in ("|>", *op)]


def _keys(ops: list[Op]) -> list[Op]:
    """The ops as an ad-hoc DAG writes them: the input and output named by their keys."""
    names = {"x": "in", "y": "out"}
    return [[names.get(part, part) for part in op] for op in ops]


def compare(port: int, name: str, ops: list[Op], requests: int, clients: int = 50) -> list[list[str]]:
    """COMPILED, INTERPRETED and the ad-hoc DAG of ``ops``: one row each, with CPU per run against COMPILED."""
    conn = redis.Redis(port=port)
    conn.execute_command("AI.GRAPHSTORE", name, "INPUTS", 1, "x", "OUTPUTS", 1, "y", *piped(ops))
    conn.close()
    where = target("ours", port)
    runs = {
        "COMPILED": ["AI.GRAPHEXECUTE", name, "INPUTS", "1", "in", "OUTPUTS", "1", "out"],
        "INTERPRETED": ["AI.GRAPHEXECUTE", name, "INPUTS", "1", "in", "OUTPUTS", "1", "out", "MODE", "INTERPRETED"],
        "ad-hoc AI.DAGEXECUTE": ["AI.DAGEXECUTE", "LOAD", "1", "in", "PERSIST", "1", "out", *piped(_keys(ops))],
    }
    for command in runs.values():  # warm: models loaded, graph bound, inline estimates measured
        measure(where, command, 500, clients)
    measured: dict[str, Measured] = {label: measure(where, command, requests, clients)
                                     for label, command in runs.items()}
    base = measured["COMPILED"].cpu_us
    return [[f"{name}: {label}", *result.cells(), f"{result.cpu_us / base:.2f}x"] for label, result in measured.items()]


def two_devices(conn: redis.Redis, calls: int) -> list[list[str]]:
    blob = models.torch_slow()
    store_two_device_models(conn, blob)
    for name, (first, second) in (("one", ("c0", "c1")), ("two", ("s0", "s1"))):
        conn.execute_command("AI.GRAPHSTORE", name, "INPUTS", 1, "x", "OUTPUTS", 2, "a", "b",
                             *piped([_model_op(first, ["x"], "a"), _model_op(second, ["x"], "b")]))

    def run(name: str) -> Callable[[], object]:
        return lambda: conn.execute_command("AI.GRAPHEXECUTE", name, "INPUTS", 1, "img", "OUTPUTS", 2, "oa", "ob")

    one_ms, two_ms = [], []
    for _ in range(calls):  # interleaved: a neighbour's load on this shared machine weighs on both alike
        one_ms.append(median_ms(run("one"), 1))
        two_ms.append(median_ms(run("two"), 1))
    one, two = statistics.median(one_ms[1:] or one_ms), statistics.median(two_ms[1:] or two_ms)
    return [["2 branches, 1 device (CPU)", f"{one:.1f}", "1.00x"],
            ["2 branches, 2 devices (CPU:0, CPU:1)", f"{two:.1f}", f"{one / two:.2f}x"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="requests per redis-benchmark run")
    parser.add_argument("--clients", type=int, default=50, help="redis-benchmark connections of the 10-op rows")
    parser.add_argument("--calls", type=int, default=15, help="calls per median in the two-device comparison")
    parser.add_argument("--tree", help="run our server from this checkout (compiled there) instead")
    args = parser.parse_args()
    with our_server("--intra-op-parallelism", "1", tree=args.tree) as port:
        conn = redis.Redis(port=port)
        conn.execute_command("AI.MODELSTORE", "dbl", "TORCH", "CPU", "BLOB", models.torch_double())
        conn.execute_command("AI.MODELSTORE", "add", "TORCH", "CPU", "BLOB", models.torch_add())
        conn.execute_command("AI.TENSORSET", "in", "FLOAT", 1, 4, "VALUES", 1, 2, 3, 4)
        rows = [*compare(port, "chain10", chain_ops(), args.requests, args.clients),
                *compare(port, "fan10", fan_ops(), args.requests, args.clients)]
        print_table(f"10 tiny ops, {args.clients} clients (redis-benchmark; CPU: ours +store)",
                    ["run", *CELL_NAMES, "CPU vs COMPILED"], rows)
        print_table("Two slow branches (median ms)", ["graph", "ms", "speedup"], two_devices(conn, args.calls))


if __name__ == "__main__":
    main()
