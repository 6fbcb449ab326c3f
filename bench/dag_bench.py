"""DAG benchmarks: two devices vs one, and one DAG vs the same work as separate commands.

Usage: python -m bench.dag_bench [--calls N]

1. A DAG with two independent slow branches (tests/models.py torch_slow, 256x256 input) whose models sit on
   CPU:0 and CPU:1, against the same DAG with both models on CPU: median wall time and the speedup.
2. TENSORSET → MODELEXECUTE (64→128→10 MLP) → TENSORGET as three commands (three round trips) against one
   AI.DAGEXECUTE doing the same: median latency of each and the ratio.
3. 50 clients (redis-benchmark) of a DAG that LOADs the input, runs the MLP and TENSORGETs the output:
   requests/s, p50/p99 and server CPU µs per request.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import redis

from bench.common import CELL_NAMES, measure, median_ms, our_server, print_table, store_two_device_models, target
from tests import models


def two_devices(conn: redis.Redis, calls: int) -> list[list[str]]:
    blob = models.torch_slow()
    store_two_device_models(conn, blob)

    def dag(first: str, second: str) -> Callable[[], object]:
        return lambda: conn.execute_command(
            "AI.DAGEXECUTE", "LOAD", 1, "img", "|>", "AI.MODELEXECUTE", first, "INPUTS", 1, "img", "OUTPUTS", 1, "a",
            "|>", "AI.MODELEXECUTE", second, "INPUTS", 1, "img", "OUTPUTS", 1, "b")

    one = median_ms(dag("c0", "c1"), calls)
    two = median_ms(dag("s0", "s1"), calls)
    return [["2 branches, 1 device (CPU)", f"{one:.1f}", "1.00x"],
            ["2 branches, 2 devices (CPU:0, CPU:1)", f"{two:.1f}", f"{one / two:.2f}x"]]


def round_trips(conn: redis.Redis, calls: int) -> list[list[str]]:
    conn.execute_command("AI.MODELSTORE", "mlp", "TORCH", "CPU", "BLOB", models.torch_mlp())
    blob = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32).tobytes()

    def separate() -> object:
        conn.execute_command("AI.TENSORSET", "in", "FLOAT", 1, 64, "BLOB", blob)
        conn.execute_command("AI.MODELEXECUTE", "mlp", "INPUTS", 1, "in", "OUTPUTS", 1, "out")
        return conn.execute_command("AI.TENSORGET", "out", "BLOB")

    def one_dag() -> object:
        return conn.execute_command("AI.DAGEXECUTE", "ROUTING", "in", "|>", "AI.TENSORSET", "in", "FLOAT", 1, 64,
                                    "BLOB", blob, "|>", "AI.MODELEXECUTE", "mlp", "INPUTS", 1, "in", "OUTPUTS", 1,
                                    "out", "|>", "AI.TENSORGET", "out", "BLOB")

    median_ms(separate, 50)
    three = median_ms(separate, calls)
    dag = median_ms(one_dag, calls)
    return [["TENSORSET + MODELEXECUTE + TENSORGET", f"{three:.3f}", "1.00x"],
            ["one AI.DAGEXECUTE", f"{dag:.3f}", f"{three / dag:.2f}x"]]


def loaded_dag(port: int, requests: int) -> list[list[str]]:
    """50 clients of a 3-op DAG: LOAD the input, run the MLP, TENSORGET the output (stored by round_trips)."""
    result = measure(target("ours", port), ["AI.DAGEXECUTE", "LOAD", "1", "in", "|>", "AI.MODELEXECUTE", "mlp",
                                            "INPUTS", "1", "in", "OUTPUTS", "1", "out", "|>", "AI.TENSORGET", "out",
                                            "BLOB"], requests)
    return [["LOAD + MODELEXECUTE + TENSORGET", *result.cells()]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500, help="calls for the round-trip comparison")
    calls = parser.parse_args().calls
    with our_server("--intra-op-parallelism", "1") as port:
        conn = redis.Redis(port=port)
        print_table("Two slow branches (median ms)", ["DAG", "ms", "speedup"], two_devices(conn, 15))
        print_table("Round trips (median ms per sequence)", ["work", "ms", "speedup"], round_trips(conn, calls))
        print_table("A 3-op DAG, 50 clients (redis-benchmark; CPU: ours +store)", ["DAG", *CELL_NAMES],
                    loaded_dag(port, calls * 20))


if __name__ == "__main__":
    main()
