"""Real-size tensors: a 602 KB image through our server, against redis-server's SET/GET of the same bytes.

Usage: python -m bench.datapath_bench [--requests N] [--clients C] [--tree DIR]

The tensor is a 1x3x224x224 FLOAT image (602,112 bytes); the model is a global mean pool and a 3->10 linear
layer (TorchScript), so its compute is negligible and only moving the tensor is measured. Rows, each at
``clients`` client connections (redis-benchmark; the pipelined row: that many client processes of raw RESP):

* the reference: SET and GET of the same 602 KB straight to a redis-server started here;
* the floor: the same SET through a process that only forwards bytes (bench/relay_floor.py), its CPU + the
  redis-server's: the least a server in front of a store spends, the kernel's receive and send of each byte;
* AI.TENSORSET of the image, AI.TENSORGET BLOB of it, AI.MODELEXECUTE on the stored image;
* one request pipelined: AI.TENSORSET + AI.MODELEXECUTE + AI.TENSORGET of the logits; then its first command
  alone and its first two, from the same client processes (what the clients cost, and what the run adds).

CPU per request is ours + the embedded store's (both from /proc/PID/stat over the run), and the ratio is
taken against redis-server's own CPU for SET or GET in the same run. The data-path targets (docs/performance.md):
TENSORSET <= 2.5x SET, TENSORGET BLOB <= 2.5x GET, MODELEXECUTE <= 300 us, the pipeline <= TENSORSET + 350 us.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import socket
import time
from dataclasses import dataclass

import hiredis
import redis
import torch

from bench import relay_floor
from bench.common import (
    CELL_NAMES,
    Measured,
    Target,
    cpu_seconds,
    measure,
    our_server,
    print_table,
    redis_server,
    stack,
    target,
)

SHAPE = (1, 3, 224, 224)
IMAGE_BYTES = 4 * 3 * 224 * 224


class PoolLinear(torch.nn.Module):
    """Global mean pool then a 3->10 linear layer: an image classifier's shape with no compute to speak of."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.mean(dim=(2, 3)))


def pool_linear_blob() -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(PoolLinear()), buffer)
    return buffer.getvalue()


def image() -> bytes:
    """The image's bytes: no NUL byte (redis-benchmark's -x argument is a C string): 'ABCD' is float32 780.0."""
    return b"ABCD" * (IMAGE_BYTES // 4)


def pack(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)


def pipelined_request(client: int, replies: int = 3) -> bytes:
    """TENSORSET + MODELEXECUTE + TENSORGET of the logits, the keys the client's own; the first ``replies``
    of them (1: the TENSORSET alone, sent by the same clients: what the clients themselves cost the server)."""
    img, out = b"img%d" % client, b"out%d" % client
    dims = [str(d).encode() for d in SHAPE]
    commands = (pack(b"AI.TENSORSET", img, b"FLOAT", *dims, b"BLOB", image()),
                pack(b"AI.MODELEXECUTE", b"pool", b"INPUTS", b"1", img, b"OUTPUTS", b"1", out),
                pack(b"AI.TENSORGET", out, b"BLOB"))
    return b"".join(commands[:replies])


def _pipeline_client(port: int, client: int, requests: int, latencies: list[float], expected: int = 3) -> None:
    request = pipelined_request(client, expected)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        reader = hiredis.Reader()
        for _ in range(requests):
            started = time.perf_counter()
            conn.sendall(request)
            replies = 0
            while replies < expected:
                reader.feed(conn.recv(1 << 20))
                while (reply := reader.gets()) is not False:
                    if isinstance(reply, hiredis.ReplyError):
                        raise RuntimeError(f"pipelined request failed: {reply}")
                    replies += 1
            latencies.append(time.perf_counter() - started)


def _pipeline_process(port: int, client: int, requests: int, out: multiprocessing.Queue[list[float]],
                      expected: int) -> None:
    latencies: list[float] = []
    _pipeline_client(port, client, requests, latencies, expected)
    out.put(latencies)


def measure_pipeline(where: Target, requests: int, clients: int, commands: int = 3) -> Measured:
    """``clients`` processes each sending ``requests // clients`` pipelined requests, one after another (each
    the first ``commands`` of ``pipelined_request``)."""
    each = max(1, requests // clients)
    results: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    before = cpu_seconds(where.pid), cpu_seconds(where.store_pid)
    started = time.perf_counter()
    procs = [multiprocessing.Process(target=_pipeline_process, args=(where.port, i, each, results, commands))
             for i in range(clients)]
    for proc in procs:
        proc.start()
    latencies = sorted(sample for _ in procs for sample in results.get(timeout=300))
    for proc in procs:
        proc.join(60)
    elapsed = time.perf_counter() - started
    after = cpu_seconds(where.pid), cpu_seconds(where.store_pid)
    done = each * clients
    return Measured(done / elapsed, latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000,
                    (after[0] - before[0]) * 1e6 / done, (after[1] - before[1]) * 1e6 / done)


@dataclass(frozen=True, slots=True)
class Row:
    test: str
    ours: Measured
    reference: Measured | None

    def cells(self) -> list[object]:
        ours_total = self.ours.cpu_us + self.ours.store_cpu_us
        ref = self.reference
        return [self.test, *self.ours.cells(), f"{ours_total:.0f}",
                *(ref.cells()[3:] if ref else [""]), f"{ours_total / ref.cpu_us:.2f}" if ref else ""]


def prepare(port: int) -> None:
    conn = redis.Redis(port=port)
    conn.execute_command("AI.MODELSTORE", "pool", "TORCH", "CPU", "BLOB", pool_linear_blob())
    conn.execute_command("AI.TENSORSET", "img", "FLOAT", *SHAPE, "BLOB", image())
    for _ in range(20):  # loads the model, measures it (inline or not)
        conn.execute_command("AI.MODELEXECUTE", "pool", "INPUTS", 1, "img", "OUTPUTS", 1, "out")
    conn.close()


def run(requests: int, clients: int, tree: str | None = None) -> None:
    """The rows above; ``tree``: run our server from that checkout instead (this virtualenv's Python)."""
    dims = [str(d) for d in SHAPE]
    with stack() as servers:
        ref = target("redis-server", servers.enter_context(redis_server()))
        ours = target("ours (embedded)", servers.enter_context(our_server(tree=tree)))
        prepare(ours.port)
        set_ref = measure(ref, ["SET", "k"], requests, clients, image())
        get_ref = measure(ref, ["GET", "k"], requests, clients)
        floor_port, floor_pid = servers.enter_context(relay_floor.running(ref.port))
        floor = Target("forwarder", floor_port, floor_pid, ref.pid)
        rows = [
            Row("floor: SET via a bare forwarder / SET", measure(floor, ["SET", "k"], requests, clients, image()),
                set_ref),
            Row("AI.TENSORSET 602 KB / SET", measure(ours, ["AI.TENSORSET", "t", "FLOAT", *dims, "BLOB"], requests,
                                                     clients, image()), set_ref),
            Row("AI.TENSORGET BLOB / GET", measure(ours, ["AI.TENSORGET", "img", "BLOB"], requests, clients),
                get_ref),
            Row("AI.MODELEXECUTE stored 602 KB", measure(ours, ["AI.MODELEXECUTE", "pool", "INPUTS", "1", "img",
                                                                "OUTPUTS", "1", "out"], requests, clients), None),
            Row("pipelined SET+EXECUTE+GET", measure_pipeline(ours, requests, clients), None),
            Row("  its TENSORSET alone", measure_pipeline(ours, requests, clients, 1), None),
            Row("  its TENSORSET+EXECUTE", measure_pipeline(ours, requests, clients, 2), None),
        ]
    header = ["test", *(f"ours {c}" for c in CELL_NAMES), "ours+store us", "redis CPU us/req", "CPU ratio"]
    print_table(f"602 KB image (1x3x224x224 FLOAT), {clients} clients, {requests} requests a row (CPU per request: "
                "ours +the embedded store; ratio: ours+store / redis-server's SET or GET)", header,
                [row.cells() for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000, help="requests per row")
    parser.add_argument("--clients", type=int, default=8, help="client connections (processes for the pipeline)")
    parser.add_argument("--tree", default=None, help="another checkout to run our server from (compiled there)")
    args = parser.parse_args()
    run(args.requests, args.clients, args.tree)


if __name__ == "__main__":
    main()
