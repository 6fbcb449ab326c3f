"""The GPU benchmark of issue 47: examples/resnet.py's ResNet-18 on one GPU, in process and through the server.

Prints, in one run, where CUDA is present (elsewhere one line, ``gpu_bench: no CUDA: skipped``, exit 0):

* torch's floor in this process: batch 1 with its copies (host → GPU → host, p50) and batch 16 (img/s, with
  and without the copies);
* through the server (``python -m server`` on loopback, the embedded store): 1 and 32 client processes, each
  sending one pipelined request at a time (AI.TENSORSET + AI.MODELEXECUTE + AI.TENSORGET), to a model stored
  without and with BATCHSIZE 16, on one process and with ``--workers N``: req/s, p50/p99 and the server's CPU
  (its whole process tree, store included) per request;
* a 3-op graph of GPU models (three 3x3 convolutions on a 1x3x224x224 image) run by the DAG engine in this
  process, with the intermediates copied to the host, kept on the GPU (dag/residency.py), and kept with CUDA
  graphs (backends/cuda_graphs.py): runs/s and p50;
* the ResNet at batch 1 in the DAG engine: 8 submitting threads on one lane against two (``--gpu-lanes``),
  and one thread eager against CUDA graphs (``--cuda-graphs``).

Every loop is bounded in count and in time; clients talk to 127.0.0.1 only; the bench stops only the
processes it started, by their pid. Usage::

    python -m bench.gpu_bench [--seconds 3] [--clients 32] [--workers 4] [--requests 2000]
    make gpu-bench
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BATCH = 16
SKIPPED = "gpu_bench: no CUDA: skipped"


@dataclass(frozen=True, slots=True)
class Row:
    """One measured line of the table."""

    name: str
    rate: float  # requests (or images, or graph runs) per second
    p50_ms: float
    p99_ms: float
    cpu_us: float | None = None  # server CPU per request (process tree)

    def line(self) -> str:
        cpu = f"{self.cpu_us:10.0f}" if self.cpu_us is not None else f"{'-':>10}"
        return f"{self.name:<64} {self.rate:10,.0f} {self.p50_ms:9.3f} {self.p99_ms:9.3f} {cpu}"


HEADER = f"{'measure':<64} {'per s':>10} {'p50 ms':>9} {'p99 ms':>9} {'CPU us/req':>10}"


def cuda_ready() -> bool:
    """torch imports and sees a GPU."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def load_resnet_example() -> ModuleType:
    """examples/resnet.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("resnet_example", ROOT / "examples" / "resnet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def percentile_ms(samples: Sequence[float], q: float) -> float:
    """The q-th percentile of ``samples`` (seconds) in ms."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000


def timed_loop(call: Callable[[], None], seconds: float, limit: int) -> list[float]:
    """``call`` repeated until ``seconds`` have passed or ``limit`` calls were made; each call's seconds."""
    samples: list[float] = []
    deadline = time.monotonic() + seconds
    while len(samples) < limit and time.monotonic() < deadline:
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


# --- torch's floor --------------------------------------------------------------------------------------------


def floor_rows(resnet: ModuleType, seconds: float) -> list[Row]:
    """torch alone: batch 1 with the copies, batch 16 with and without them."""
    import torch

    net = resnet.build(resnet.FULL).cuda()
    side = resnet.FULL.image
    one = np.random.default_rng(0).standard_normal((1, 3, side, side), dtype=np.float32)
    many = np.random.default_rng(1).standard_normal((BATCH, 3, side, side), dtype=np.float32)
    on_gpu = torch.from_numpy(many).cuda()

    def with_copies(images: np.ndarray) -> None:
        net(torch.from_numpy(images).cuda()).cpu().numpy()

    def on_device() -> None:
        net(on_gpu)
        torch.cuda.synchronize()

    with torch.no_grad():
        for _ in range(5):  # cuDNN picks its algorithms
            with_copies(one)
            with_copies(many)
        single = timed_loop(partial(with_copies, one), seconds, 20_000)
        batched = timed_loop(partial(with_copies, many), seconds, 5_000)
        resident = timed_loop(on_device, seconds, 5_000)
    return [_rate_row("torch in process, batch 1 with copies (img/s)", single, 1),
            _rate_row(f"torch in process, batch {BATCH} with copies (img/s)", batched, BATCH),
            _rate_row(f"torch in process, batch {BATCH} on the GPU (img/s)", resident, BATCH)]


def _rate_row(name: str, samples: Sequence[float], per_call: int) -> Row:
    rate = per_call * len(samples) / sum(samples) if samples else 0.0
    return Row(name, rate, percentile_ms(samples, 0.5), percentile_ms(samples, 0.99))


# --- through the server ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Clients:
    """One many-client measurement: where, which model, how many client processes, image side, bounds."""

    port: int
    key: str
    count: int
    side: int
    seconds: float
    limit: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """Every latency of a measurement, the seconds from the start signal to the last client's end, and the
    server's CPU seconds over that window."""

    latencies: list[float]
    elapsed: float
    cpu: float


def client_process(job: Clients, seed: int, ready: Any, go: Any, out: Any) -> None:
    """One client process: one warm request, then (after ``go``) pipelined TENSORSET + MODELEXECUTE + TENSORGET
    until ``job.seconds`` or ``job.limit`` requests; puts (latencies, end time) or an error text on ``out``."""
    import redis

    image = np.random.default_rng(seed).standard_normal((1, 3, job.side, job.side), dtype=np.float32)
    conn = redis.Redis(host="127.0.0.1", port=job.port, socket_timeout=60)
    tag = f"{job.key}:{seed}"

    def request() -> None:
        pipe = conn.pipeline(transaction=False)
        pipe.execute_command("AI.TENSORSET", f"in:{tag}", "FLOAT", 1, 3, job.side, job.side, "BLOB", image.tobytes())
        pipe.execute_command("AI.MODELEXECUTE", job.key, "INPUTS", 1, f"in:{tag}", "OUTPUTS", 1, f"out:{tag}")
        pipe.execute_command("AI.TENSORGET", f"out:{tag}", "BLOB")
        pipe.execute()

    try:
        request()  # warm: the model loads in this server process, cuDNN picks its algorithms
        ready.put(seed)
        if not go.wait(120):
            raise TimeoutError("no start signal")
        latencies = timed_loop(request, job.seconds, job.limit)
        out.put((latencies, time.time()))
    except Exception as exc:  # reported by the parent
        ready.put(seed)
        out.put(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def run_clients(job: Clients, server_pid: int) -> Outcome:
    """``job.count`` client processes started together once all are warm; their latencies, the window and the
    server's CPU over it. Processes still alive past the bound are stopped (only these, by their handles)."""
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Queue(), context.Event(), context.Queue()
    procs = [context.Process(target=client_process, args=(job, n, ready, go, out), daemon=True)
             for n in range(job.count)]
    for proc in procs:
        proc.start()
    bound = time.monotonic() + job.seconds + 240
    try:
        list(_replies(ready, procs, bound))
        cpu_before, started = tree_cpu_seconds(server_pid), time.time()
        go.set()
        replies = list(_replies(out, procs, bound))
        cpu = tree_cpu_seconds(server_pid) - cpu_before
    finally:
        for proc in procs:
            proc.join(max(bound - time.monotonic(), 1.0))
            if proc.is_alive():
                proc.terminate()
    errors = [reply for reply in replies if isinstance(reply, str)]
    if errors or not replies:
        raise RuntimeError(f"{job.key}: {errors[0] if errors else 'no client answered'}")
    ended = max(reply[1] for reply in replies)
    return Outcome([t for reply in replies for t in reply[0]], max(ended - started, 1e-9), cpu)


def _replies(out: Any, procs: Sequence[Any], bound: float) -> Iterator[Any]:
    """Each client's report, until all reported, ``bound`` passed, or every client ended without one."""
    import queue

    for _ in procs:
        while True:
            try:
                yield out.get(timeout=1.0)
                break
            except queue.Empty:
                if time.monotonic() > bound or not any(proc.is_alive() for proc in procs):
                    return


def tree_cpu_seconds(root: int) -> float:
    """user + system CPU seconds of ``root`` and every process below it (the --workers processes, the store)."""
    from bench.common import cpu_seconds

    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(cpu_seconds(pid) for pid in tree)


def store_models(port: int, blob: bytes, device: str) -> None:
    """The ResNet stored twice on ``device``: without batching and with BATCHSIZE 16."""
    import redis

    conn = redis.Redis(host="127.0.0.1", port=port, socket_timeout=300)
    try:
        conn.execute_command("AI.MODELSTORE", "resnet", "TORCH", device, "BLOB", blob)
        conn.execute_command("AI.MODELSTORE", "resnet_b16", "TORCH", device, "BATCHSIZE", BATCH, "BLOB", blob)
    finally:
        conn.close()


@contextmanager
def started_server(workers: int, options: Sequence[str] = ()) -> Iterator[tuple[int, int]]:
    """``python -m server --workers N [options]`` on a free loopback port; yields (port, pid); stopped by that pid
    (its supervisor stops its own worker processes and store)."""
    import subprocess

    from tests.support import free_port, wait_for_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--log-level", "warning",
                             "--workers", str(workers), *options], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=60)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass(frozen=True, slots=True)
class Served:
    """What the server rows run: the model's blob, its device, the image side it takes, the server's further
    options (``--cuda-graphs yes``) and whether the BATCHSIZE model is measured too."""

    blob: bytes
    device: str = "GPU:0"
    side: int = 224
    options: tuple[str, ...] = ()
    batching: bool = True


def server_rows(served: Served, workers: int, clients: Sequence[int], seconds: float, limit: int) -> list[Row]:
    """Every (client count, batching) measurement on one server started with ``--workers workers``."""
    rows: list[Row] = []
    side = served.side
    models = (("resnet", "no batching"), ("resnet_b16", f"BATCHSIZE {BATCH}"))[: 2 if served.batching else 1]
    flags = "".join(f" {option}" for option in served.options)
    with started_server(workers, served.options) as (port, pid):
        store_models(port, served.blob, served.device)
        for key, label in models:
            for count in clients:
                got = run_clients(Clients(port, key, count, side, seconds, limit), pid)
                name = f"server --workers {workers}{flags}, {count} client(s), {label}"
                rows.append(Row(name, len(got.latencies) / got.elapsed, percentile_ms(got.latencies, 0.5),
                                percentile_ms(got.latencies, 0.99), got.cpu * 1e6 / max(len(got.latencies), 1)))
    return rows


# --- a 3-op graph in the DAG engine ---------------------------------------------------------------------------


def conv_blob() -> bytes:
    """A 3x3 convolution keeping a 1x3x224x224 image's shape (so the intermediates are full-size)."""
    import torch

    module = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.ReLU()).eval()
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


@dataclass(frozen=True, slots=True)
class Engine:
    """One in-process measurement of the DAG engine: the models of a chain (each op feeds the next), its input,
    the queue manager's settings (lanes kept resident, CUDA graphs, lanes per GPU queue), submitting threads."""

    name: str
    blobs: tuple[bytes, ...]
    image: np.ndarray
    keep: bool = True
    cuda_graphs: bool = False
    gpu_lanes: int = 2
    threads: int = 1
    device: str = "GPU:0"


def graph_rows(seconds: float, limit: int) -> list[Row]:
    """The same 3-op graph on GPU:0: intermediates copied to the host, kept on the GPU, kept and replayed from
    CUDA graphs."""
    image = np.random.default_rng(2).standard_normal((1, 3, 224, 224), dtype=np.float32)
    name = "3-op GPU graph (DAG engine), intermediates"
    blobs = (conv_blob(),) * 3
    return [engine_row(Engine(f"{name} copied to the host (runs/s)", blobs, image, keep=False), seconds, limit),
            engine_row(Engine(f"{name} kept on the GPU (runs/s)", blobs, image), seconds, limit),
            engine_row(Engine(f"{name} kept, CUDA graphs (runs/s)", blobs, image, cuda_graphs=True), seconds, limit)]


def lane_and_graph_rows(blob: bytes, side: int, seconds: float, limit: int) -> list[Row]:
    """ResNet-18 at batch 1 in the DAG engine: one lane against two under 8 submitting threads (copies overlap
    compute), and eager against CUDA graphs for one thread (launch overhead)."""
    image = np.random.default_rng(3).standard_normal((1, 3, side, side), dtype=np.float32)
    name = "ResNet-18 batch 1 (DAG engine)"
    return [engine_row(Engine(f"{name}, 8 threads, 1 lane (runs/s)", (blob,), image, gpu_lanes=1, threads=8),
                       seconds, limit),
            engine_row(Engine(f"{name}, 8 threads, 2 lanes (runs/s)", (blob,), image, threads=8), seconds, limit),
            engine_row(Engine(f"{name}, 1 thread, eager (runs/s)", (blob,), image), seconds, limit),
            engine_row(Engine(f"{name}, 1 thread, CUDA graphs (runs/s)", (blob,), image, cuda_graphs=True),
                       seconds, limit)]


def engine_row(engine: Engine, seconds: float, limit: int) -> Row:
    """Runs of the chain through QueueManager's workers, each submitting thread one run at a time; the rate
    over all threads and every run's latency."""
    import threading

    from backends.base import RuntimeOptions
    from backends.device import parse_device
    from backends.tensor import Tensor
    from backends.torch_backend import TorchBackend
    from dag.execute import ModelWork
    from dag.lanes import gpu_lane
    from dag.manager import QueueManager
    from dag.runinfo import RunInfo, Step

    device = parse_device(engine.device.encode())
    works = [ModelWork(TorchBackend().load_model(blob, device, RuntimeOptions()), 1) for blob in engine.blobs]
    image = Tensor.from_numpy(engine.image)
    manager = QueueManager(1, lanes=partial(gpu_lane, keep_resident=engine.keep, cuda_graphs=engine.cuda_graphs),
                           gpu_lanes=engine.gpu_lanes)
    count = len(works)

    def one_run() -> None:
        done = threading.Event()
        steps = [Step(i, device.queue_name, (i,), (i + 1,), works[i]) for i in range(count)]
        run = RunInfo(steps, [image, *([None] * count)], on_done=lambda _run: done.set())
        manager.submit(run)
        if not done.wait(60) or not all(result.ok for result in run.results):
            raise RuntimeError("a run failed or never ended")

    per_thread: list[list[float]] = [[] for _ in range(engine.threads)]

    def submitter(number: int) -> None:
        per_thread[number] = timed_loop(one_run, seconds, limit)

    try:
        timed_loop(one_run, 1.0, 20)  # warm: cuDNN's algorithms, the graphs' captures
        submitters = [threading.Thread(target=submitter, args=(n,)) for n in range(engine.threads)]
        started = time.perf_counter()
        for thread in submitters:
            thread.start()
        for thread in submitters:
            thread.join(seconds + 120)
        elapsed = time.perf_counter() - started
    finally:
        manager.close(10)
    samples = [t for thread_samples in per_thread for t in thread_samples]
    return Row(engine.name, len(samples) / max(elapsed, 1e-9), percentile_ms(samples, 0.5),
               percentile_ms(samples, 0.99))


# --- the run --------------------------------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each measurement (default 3)")
    parser.add_argument("--clients", type=int, default=32, help="client processes of the many-client runs")
    parser.add_argument("--workers", type=int, default=4, help="--workers of the multi-process server")
    parser.add_argument("--requests", type=int, default=2000, help="most requests per client per measurement")
    return parser.parse_args(argv)


def main(argv: Sequence[str] = ()) -> int:
    args = parse(argv)
    if not cuda_ready():
        print(SKIPPED)
        return 0
    import torch

    resnet = load_resnet_example()
    side = resnet.FULL.image
    blob = resnet.to_torchscript(resnet.build(resnet.FULL), torch.randn(1, 3, side, side))
    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    print(HEADER)
    for row in floor_rows(resnet, args.seconds):
        print(row.line(), flush=True)
    for workers in sorted({1, args.workers}):
        for row in server_rows(Served(blob), workers, (1, args.clients), args.seconds, args.requests):
            print(row.line(), flush=True)
    for options in (("--gpu-lanes", "1"), ("--cuda-graphs", "yes")):  # against the default rows above
        for row in server_rows(Served(blob, options=options, batching=False), 1, (1, args.clients), args.seconds,
                               args.requests):
            print(row.line(), flush=True)
    for row in [*graph_rows(args.seconds, args.requests),
                *lane_and_graph_rows(blob, side, args.seconds, args.requests)]:
        print(row.line(), flush=True)
    print("server rows: latency of one pipelined request; CPU is the server's process tree (store included)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
