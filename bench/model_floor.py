"""The least a Python server can spend on a small model's AI.MODELEXECUTE: read it, run the model, write the output
to a store, reply.

Usage: python -m bench.model_floor --port PORT --store-socket PATH   (serves until killed)

Built as our server is built (uvloop's event loop, hiredis to read commands, the model run on the loop thread
with autograd off and one intra-op thread, the store's writes of one loop round in one write), and nothing else:
every command is taken for ``AI.MODELEXECUTE m INPUTS 1 x OUTPUTS 1 y`` whatever it says. Its input is a tensor
made at start, the model the 64→128→10 MLP of tests/models.py; the output's bytes go to the store as one plain
``SET``, and the store's reply sends ``+OK``. There is no argument parsing, no lookup, no check of the model or
the inputs, no counters and no header: what it spends is what a server written in Python pays for this request
at all (two sockets' reads and writes, the call into torch and the bytes out of it) plus the store's write.
bench.model_bench runs the MLP's MODELEXECUTE through it beside ours: the floor under that row.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, cast

import hiredis
import numpy as np
import torch
import uvloop

from server.store.process import find_store_binary
from tests import models
from tests.support import free_port, wait_for_port, wait_until

OK_REPLY = b"+OK\r\n"
COMMAND = ("AI.MODELEXECUTE", "m", "INPUTS", "1", "x", "OUTPUTS", "1", "y")  # what it is sent (it reads none of it)


class Floor:
    """The one model, its input, the store connection and the clients waiting for its replies, in order."""

    def __init__(self, forward: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray) -> None:
        self._forward = forward
        self._x = x
        self._outbox: list[bytes] = []
        self._waiting: deque[asyncio.Transport] = deque()
        self._replies = hiredis.Reader()
        self.store: asyncio.Transport | None = None

    def execute(self, client: asyncio.Transport) -> None:
        """Run the model, queue its output's SET and the client to answer when the store replies."""
        payload = self._forward(torch.from_numpy(self._x)).numpy().tobytes()
        self._outbox.append(b"*3\r\n$3\r\nSET\r\n$1\r\ny\r\n$%d\r\n%b\r\n" % (len(payload), payload))
        self._waiting.append(client)
        if len(self._outbox) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        if self.store is not None and self._outbox:
            self.store.write(b"".join(self._outbox))
            self._outbox.clear()

    def store_data(self, data: bytes) -> None:
        self._replies.feed(data)
        while self._replies.gets() is not False:
            client = self._waiting.popleft()
            if not client.is_closing():
                client.write(OK_REPLY)


class ClientProtocol(asyncio.Protocol):
    def __init__(self, floor: Floor) -> None:
        self._floor = floor
        self._commands = hiredis.Reader()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass of it)

    def data_received(self, data: bytes) -> None:
        self._commands.feed(data)
        while self._commands.gets() is not False:
            assert self._transport is not None
            self._floor.execute(self._transport)


class StoreProtocol(asyncio.Protocol):
    def __init__(self, floor: Floor) -> None:
        self._floor = floor

    def data_received(self, data: bytes) -> None:
        self._floor.store_data(data)


async def serve(port: int, store_socket: str) -> None:
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)  # this (the loop's) thread's setting, as our server's runs have it
    module: Any = torch.jit.load(io.BytesIO(models.torch_mlp()))
    floor = Floor(module.forward, model_input())
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_unix_connection(lambda: StoreProtocol(floor), store_socket)
    floor.store = transport
    server = await loop.create_server(lambda: ClientProtocol(floor), "127.0.0.1", port)
    await server.serve_forever()


class RunningFloor(NamedTuple):
    port: int
    pid: int
    store_pid: int
    store_socket: str


def model_input() -> np.ndarray:
    """The one input every request runs on (bench.model_bench stores the same one as ``x``)."""
    return np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)


@contextmanager
def running(prefix: Sequence[str] = (), start_timeout_s: float = 60.0) -> Iterator[RunningFloor]:
    """A valkey-server (the embedded store's binary) on a unix socket and this floor in front of it, each its own
    process. ``prefix``: what the floor's command line runs under (bench.instructions: callgrind)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        socket_path = str(Path(scratch) / "store.sock")
        store = subprocess.Popen([find_store_binary(""), "--port", "0", "--unixsocket", socket_path, "--save", "",
                                  "--appendonly", "no", "--dir", scratch],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        floor: subprocess.Popen[bytes] | None = None
        try:
            if not wait_until(Path(socket_path).exists, timeout=10):
                raise TimeoutError(f"no store socket at {socket_path}")
            floor = subprocess.Popen([*prefix, sys.executable, "-m", "bench.model_floor", "--port", str(port),
                                      "--store-socket", socket_path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_port(port, timeout=start_timeout_s)
            yield RunningFloor(port, floor.pid, store.pid, socket_path)
        finally:
            for proc in (floor, store):
                if proc is not None:
                    proc.kill()
                    proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store-socket", required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.store_socket))


if __name__ == "__main__":
    main()
