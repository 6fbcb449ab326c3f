"""Auto-batching payoff: concurrent clients on a batch-friendly model, with and without BATCHSIZE.

Usage: python -m bench.batching_bench [--requests N] [--small-requests N]

The first model is a 1024→2048→2048→10 MLP (tests/models.py torch_wide_mlp): milliseconds a call, so its
batches run on the workers. redis-benchmark runs 32 clients of
AI.MODELEXECUTE against the same server for each way of storing the model; the table prints requests/s and
the gain over no batching. The second is the 64→128→10 MLP of bench.model_bench, 50 clients: cheap enough that
its batches run on the event-loop thread (dag/inline_batch.py); its table gives the server CPU per request and
how many requests shared each model call (INFO ai, ``executed`` of the CPU queue).
"""

from __future__ import annotations

import argparse

import numpy as np
import redis

from bench.common import CELL_NAMES, measure, our_server, print_table, target
from tests import models

SMALL_VARIANTS: dict[str, tuple[object, ...]] = {"no batching": (), "BATCHSIZE 32": ("BATCHSIZE", 32)}
VARIANTS: dict[str, tuple[object, ...]] = {
    "no batching": (),
    "BATCHSIZE 32": ("BATCHSIZE", 32),
    "BATCHSIZE 32 MINBATCHSIZE 8 MINBATCHTIMEOUT 5": ("BATCHSIZE", 32, "MINBATCHSIZE", 8, "MINBATCHTIMEOUT", 5),
}


def run(requests: int) -> None:
    blob = models.torch_wide_mlp()
    x = np.random.default_rng(0).standard_normal((1, 1024), dtype=np.float32)
    rows = []
    with our_server("--intra-op-parallelism", "1") as port:
        conn = redis.Redis(port=port)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 1024, "BLOB", x.tobytes())
        base = 0.0
        for index, (name, options) in enumerate(VARIANTS.items()):
            key = f"mlp{index}"
            conn.execute_command("AI.MODELSTORE", key, "TORCH", "CPU", *options, "BLOB", blob)
            conn.execute_command("AI.MODELEXECUTE", key, "INPUTS", 1, "x", "OUTPUTS", 1, f"y{index}")
            result = measure(target("ours", port), ["AI.MODELEXECUTE", key, "INPUTS", "1", "x", "OUTPUTS", "1",
                                                    f"y{index}"], requests, clients=32)
            base = base or result.rps
            rows.append([name, *result.cells(), f"{result.rps / base:.2f}x"])
    print_table("AI.MODELEXECUTE, 32 clients, 1024->2048->2048->10 MLP, batch 1 requests (CPU: ours +store)",
                ["model stored with", *CELL_NAMES, "gain"], rows)


def run_small(requests: int) -> None:
    x = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    rows = []
    with our_server() as port:
        conn = redis.Redis(port=port)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 64, "BLOB", x.tobytes())
        where = target("ours", port)
        for index, (name, options) in enumerate(SMALL_VARIANTS.items()):
            key = f"small{index}"
            conn.execute_command("AI.MODELSTORE", key, "TORCH", "CPU", *options, "BLOB", models.torch_mlp())
            args = ["AI.MODELEXECUTE", key, "INPUTS", "1", "x", "OUTPUTS", "1", f"ys{index}"]
            measure(where, args, requests // 10)  # warm-up: the first batches are measured on a worker
            calls = _model_calls(conn)
            result = measure(where, args, requests)
            rows.append([name, *result.cells(), f"{requests / max(_model_calls(conn) - calls, 1):.1f}"])
    print_table("AI.MODELEXECUTE, 50 clients, 64->128->10 MLP (CPU: ours +store)",
                ["model stored with", *CELL_NAMES, "requests per call"], rows)


def _model_calls(conn: redis.Redis) -> int:
    """Model calls the CPU queue made so far (a batch is one call; inline calls included)."""
    return int(conn.info("ai")["ai_queue_CPU"]["executed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000, help="requests per variant, wide MLP")
    parser.add_argument("--small-requests", type=int, default=20000, help="requests per variant, small MLP")
    arguments = parser.parse_args()
    run(arguments.requests)
    run_small(arguments.small_requests)


if __name__ == "__main__":
    main()
