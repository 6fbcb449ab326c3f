"""A real-size worked example: a ResNet-18-style image classifier served with auto-batching, and timed.

The network is built here in code with random weights (no downloads, torch only), exported to TorchScript
and to ONNX, stored on a running server with redis-py (``AI.MODELSTORE``, with and without ``BATCHSIZE``),
checked against torch in this process, then called by many concurrent clients, each one request at a time
(``AI.TENSORSET`` + ``AI.MODELEXECUTE`` + ``AI.TENSORGET`` in one pipelined round trip), every reply checked
against torch's logits for that client's image. It prints a table: requests/s, latency percentiles and the
mean batch the server ran (requests per model call: INFO ai_queues, ``executed``) and, when the server
runs on this machine, its CPU time per request (``/proc/PID/stat``).

Usage:
  redisai-server --port 6379 &                        # or any running server
  python examples/resnet.py [--port 6379] [--clients 8] [--requests 16] [--batch 8]
  python examples/resnet.py --small                   # a tiny network (the tests run this)
  python examples/resnet.py --min-batch 8             # each batched run waits for 8 requests (8 clients)

docs/examples.md has the figures measured on the project's machine.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import redis
import torch
from torch import nn


@dataclass(frozen=True)
class Size:
    """The network's shape: channels per stage, residual blocks per stage, image side, classes."""

    widths: tuple[int, ...]
    blocks: int
    image: int
    classes: int


FULL = Size(widths=(64, 128, 256, 512), blocks=2, image=224, classes=1000)  # ResNet-18's layout
SMALL = Size(widths=(8, 16, 32, 64), blocks=1, image=32, classes=10)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (a 1x1 projection when the shape
    changes), as in ResNet-18/34."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """Stem (7x7 convolution, max pool), four stages of basic blocks, global average pool, classifier."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        first = size.widths[0]
        self.stem = nn.Sequential(nn.Conv2d(3, first, 7, 2, 3, bias=False), nn.BatchNorm2d(first), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        channels = first
        for stage, width in enumerate(size.widths):
            for block in range(size.blocks):
                layers.append(BasicBlock(channels, width, 2 if stage > 0 and block == 0 else 1))
                channels = width
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(channels, size.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x))
        logits: torch.Tensor = self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(features, 1), 1))
        return logits


def build(size: Size, seed: int = 0) -> ResNet:
    """The network with random weights (and random batch-norm statistics, so every layer matters)."""
    torch.manual_seed(seed)
    net = ResNet(size)
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            assert module.running_mean is not None and module.running_var is not None
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return net.eval()


def to_torchscript(net: nn.Module, example: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(cast(Any, torch.jit).trace(net, example), buffer)
    return buffer.getvalue()


def to_onnx(net: nn.Module, example: torch.Tensor) -> bytes:
    """ONNX with a dynamic batch dimension (auto-batching stacks requests along it)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # torch 2.13 calls this exporter legacy; the new one needs onnxscript
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(net, (example,), buffer, input_names=["image"], output_names=["logits"],  # type: ignore[arg-type]
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)
    return buffer.getvalue()


@dataclass
class Result:
    """One configuration's measurements."""

    name: str
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    mean_batch: float = 0.0
    difference: float = 0.0  # the largest |served - torch| of any logit
    cpu_ms: float | None = None  # the server process's CPU time per request (None: not on this machine)

    def row(self) -> str:
        ms = sorted(1000 * value for value in self.latencies)
        p50, p99 = ms[len(ms) // 2], ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        rate = len(ms) / self.elapsed if self.elapsed else 0.0
        cpu = f"{self.cpu_ms:>8.1f}" if self.cpu_ms is not None else f"{'-':>8}"
        return (f"| {self.name:<24} | {len(ms):>8} | {rate:>8.1f} | {p50:>7.1f} | {p99:>7.1f} "
                f"| {self.mean_batch:>10.2f} | {cpu} |")


HEADER = ("| model                    | requests |    req/s |  p50 ms |  p99 ms | mean batch | CPU ms/req |\n"
          "|--------------------------|----------|----------|---------|---------|------------|------------|")


def call(target: Any, *args: Any) -> Any:
    """One command through a redis-py client or pipeline (its ``execute_command`` is untyped)."""
    return target.execute_command(*args)


def store(conn: redis.Redis, key: str, backend: str, blob: bytes, batch: int, min_batch: int) -> None:
    batching = ["BATCHSIZE", batch, *(["MINBATCHSIZE", min_batch] if min_batch else [])] if batch else []
    call(conn, "AI.MODELSTORE", key, backend, "CPU", *batching, "BLOB", blob)


def infer(conn: redis.Redis, key: str, image: np.ndarray, tag: str) -> np.ndarray:
    """One request: the image in, the model run, the logits out, in one pipelined round trip."""
    pipe = conn.pipeline(transaction=False)
    call(pipe, "AI.TENSORSET", f"in:{tag}", "FLOAT", *image.shape, "BLOB", image.tobytes())
    call(pipe, "AI.MODELEXECUTE", key, "INPUTS", 1, f"in:{tag}", "OUTPUTS", 1, f"out:{tag}")
    call(pipe, "AI.TENSORGET", f"out:{tag}", "META", "BLOB")
    reply = pipe.execute()[-1]
    shape = reply[reply.index(b"shape") + 1]
    return np.frombuffer(reply[reply.index(b"blob") + 1], dtype=np.float32).reshape(shape)


def reference(net: nn.Module, size: Size, client: int) -> tuple[np.ndarray, np.ndarray]:
    """Client ``client``'s image and torch's logits for it, computed in this process."""
    image = np.random.default_rng(client).standard_normal((1, 3, size.image, size.image), dtype=np.float32)
    with torch.no_grad():
        return image, net(torch.from_numpy(image)).numpy()


def run_clients(host: str, port: int, key: str, images: list[tuple[np.ndarray, np.ndarray]], requests: int,
                deadline: float) -> Result:
    """One thread per client, each with its own connection and image, sending ``requests`` requests in turn
    and checking every reply against torch's logits (a batched run must hand each client its own row)."""
    result = Result(key)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client(number: int) -> None:
        conn = redis.Redis(host=host, port=port, socket_timeout=120)
        image, expected = images[number]
        try:
            for _ in range(requests):
                if time.monotonic() > deadline:
                    raise TimeoutError("the example ran past its --deadline")
                started = time.perf_counter()
                served = infer(conn, key, image, f"{key}:{number}")
                elapsed = time.perf_counter() - started
                with lock:
                    result.latencies.append(elapsed)
                    result.difference = max(result.difference, float(np.abs(served - expected).max()))
            conn.delete(f"in:{key}:{number}", f"out:{key}:{number}")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(len(images))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(1.0, deadline - time.monotonic()))
    result.elapsed = time.perf_counter() - started
    if errors or any(thread.is_alive() for thread in threads):
        raise RuntimeError(f"{key}: {errors[0] if errors else 'clients still running at the deadline'}")
    return result


def model_calls(conn: redis.Redis, device: str = "CPU") -> int:
    """How many model calls the device's queue has made (INFO ai_queues, ``executed``; a batch is one)."""
    line = conn.info("ai_queues").get(f"ai_queue_{device}", {})
    fields = line if isinstance(line, dict) else dict(part.split("=", 1) for part in str(line).split(","))
    return int(fields.get("executed", 0))


def server_cpu_seconds(conn: redis.Redis) -> float | None:
    """The server process's user + system CPU time, all threads (``/proc/PID/stat``, PID from INFO server),
    when it runs on this machine; steadier than requests/s on a busy machine."""
    try:
        pid = int(conn.info("server")["process_id"])
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, KeyError, ValueError, IndexError):
        return None


def local_ms(net: nn.Module, size: Size, batch: int, repeat: int = 3) -> float:
    """torch's own time per image in this process at ``batch`` images a call (the best of ``repeat``)."""
    images = torch.randn(batch, 3, size.image, size.image)
    best = float("inf")
    with torch.no_grad():
        net(images)
        for _ in range(repeat):
            started = time.perf_counter()
            net(images)
            best = min(best, time.perf_counter() - started)
    return 1000 * best / batch


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (threads)")
    parser.add_argument("--requests", type=int, default=16, help="requests per client and model")
    parser.add_argument("--batch", type=int, default=8, help="BATCHSIZE of the batching models")
    parser.add_argument("--min-batch", type=int, default=0,
                        help="MINBATCHSIZE of the batching models: each run waits for that many requests")
    parser.add_argument("--small", action="store_true", help="a tiny network and few requests (tests)")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds before the example gives up")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    size = SMALL if args.small else FULL
    deadline = time.monotonic() + args.deadline
    torch.set_num_threads(1)  # this process's own timing: one thread, as one server worker has
    net = build(size)
    example = torch.zeros(1, 3, size.image, size.image)
    blobs = {"TORCH": to_torchscript(net, example), "ONNX": to_onnx(net, example)}
    params = sum(p.numel() for p in net.parameters())
    print(f"ResNet: stages {size.widths}, {size.blocks} blocks each, {size.image}x{size.image} images, "
          f"{size.classes} classes, {params / 1e6:.2f} M parameters; TorchScript {len(blobs['TORCH']) / 1e6:.1f} MB,"
          f" ONNX {len(blobs['ONNX']) / 1e6:.1f} MB")
    conn = redis.Redis(host=args.host, port=args.port, socket_timeout=120)
    images = [reference(net, size, client) for client in range(args.clients)]
    configs = [(f"resnet:{backend.lower()}:{'batch' + str(batch) if batch else 'single'}", backend, batch)
               for backend in blobs for batch in (0, args.batch)]
    print(f"{args.clients} clients x {args.requests} requests each, one image per request; batching models: "
          f"BATCHSIZE {args.batch}" + (f" MINBATCHSIZE {args.min_batch}" if args.min_batch else "") + "\n")
    print(HEADER)
    largest = 0.0
    for key, backend, batch in configs:
        store(conn, key, backend, blobs[backend], batch, args.min_batch)
        calls, cpu = model_calls(conn), server_cpu_seconds(conn)
        result = run_clients(args.host, args.port, key, images, args.requests, deadline)
        result.mean_batch = len(result.latencies) / max(model_calls(conn) - calls, 1)
        cpu_after = server_cpu_seconds(conn)
        if cpu is not None and cpu_after is not None:
            result.cpu_ms = 1000 * (cpu_after - cpu) / len(result.latencies)
        largest = max(largest, result.difference)
        print(result.row(), flush=True)
    if largest > 1e-3:
        print(f"the server's logits differ from torch's by up to {largest}", file=sys.stderr)
        return 1
    print(f"\nevery reply matched torch's logits in this process (max |difference| {largest:.1e})")
    print(f"\ntorch in this process, 1 thread: {local_ms(net, size, 1):.1f} ms per image at batch 1, "
          f"{local_ms(net, size, args.batch):.1f} ms per image at batch {args.batch}")
    conn.delete(*(key for key, _, _ in configs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
