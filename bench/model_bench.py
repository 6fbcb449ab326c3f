"""AI.MODELEXECUTE of a 64→128→10 MLP (TORCH and ONNX) next to the raw in-process compute of the same model.

Usage: python -m bench.model_bench [--calls N]

Prints, per backend: the in-process compute time of one batch-1 run (median), the single-client median
round-trip latency of AI.MODELEXECUTE through our server (redis-py), the server overhead per call
(latency - compute), and for 50 clients (redis-benchmark) requests/s, p50/p99 and server CPU µs per request.
The floor row is the same request at 50 clients through bench/model_floor.py, a server that only reads it, runs
the TORCH model and writes the output to its own store: what any server in Python pays for it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import redis

from backends.base import RuntimeOptions
from backends.device import Device
from backends.onnx_backend import OnnxBackend
from backends.torch_backend import TorchBackend
from bench import model_floor
from bench.common import CELL_NAMES, Target, measure, our_server, print_table, target
from tests import models


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def compute_time(backend: str, blob: bytes, calls: int) -> float:
    runtime = TorchBackend() if backend == "TORCH" else OnnxBackend()
    model = runtime.load_model(blob, Device("CPU", "CPU", None), RuntimeOptions(intra_op_threads=1))
    x = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        model.run([x])
        samples.append(time.perf_counter() - started)
    return _median_us(samples)


def server_latency(conn: redis.Redis, key: str, calls: int) -> float:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        conn.execute_command("AI.MODELEXECUTE", key, "INPUTS", 1, "x", "OUTPUTS", 1, f"y_{key}")
        samples.append(time.perf_counter() - started)
    return _median_us(samples)


def run(calls: int) -> None:
    blobs = {"TORCH": models.torch_mlp(), "ONNX": models.onnx_mlp()}
    x = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    rows = []
    with our_server() as port:
        conn = redis.Redis(port=port)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 64, "BLOB", x.tobytes())
        for backend, blob in blobs.items():
            key = f"mlp_{backend.lower()}"
            conn.execute_command("AI.MODELSTORE", key, backend, "CPU", "BLOB", blob)
            server_latency(conn, key, 50)  # warm-up
            compute = compute_time(backend, blob, calls)
            latency = server_latency(conn, key, calls)
            loaded = measure(target("ours", port), ["AI.MODELEXECUTE", key, "INPUTS", "1", "x", "OUTPUTS", "1",
                                                    f"y_{key}"], calls * 5)
            rows.append([backend, f"{compute:.1f}", f"{latency:.1f}", f"{latency - compute:.1f}", *loaded.cells()])
        with model_floor.running() as running_floor:
            floor_target = Target("floor", running_floor.port, running_floor.pid, running_floor.store_pid)
            floor = measure(floor_target, list(model_floor.COMMAND), calls * 5)
        rows.append(["floor: a bare Python server, TORCH", "", "", "", *floor.cells()])
        conn.execute_command("AI.MODELSTORE", "mlp_b32", "TORCH", "CPU", "BATCHSIZE", 32, "BLOB", blobs["TORCH"])
        batched = measure(target("ours", port), ["AI.MODELEXECUTE", "mlp_b32", "INPUTS", "1", "x", "OUTPUTS", "1",
                                                 "y_b32"], calls * 5)
        rows.append(["TORCH BATCHSIZE 32", "", "", "", *batched.cells()])
    print_table("AI.MODELEXECUTE, 64->128->10 MLP, batch 1 (one client: microseconds; then redis-benchmark, "
                "50 clients; CPU: ours +the embedded store)",
                ["backend", "compute us", "latency us", "overhead us", *CELL_NAMES], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls per measurement")
    run(parser.parse_args().calls)


if __name__ == "__main__":
    main()
