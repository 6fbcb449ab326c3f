"""The least a server between clients and a store can spend on a big value: a forwarder of bytes, nothing else.

Usage: python -m bench.relay_floor --port PORT --upstream-port UPSTREAM   (serves until killed)

Each client connection gets its own connection to the store at 127.0.0.1:UPSTREAM, and two threads that move
bytes one way each: ``recv_into`` a buffer, ``sendall`` of a view of it. No byte is copied in this process;
there is no parsing and no event loop. What it spends per request is what the kernel charges a process to
receive the bytes and send them on, which any server in front of a store pays once per byte each way.
bench.datapath_bench runs a 602 KB SET through it: that row's CPU (this process + the store) against the
store's own SET is the floor under the AI.TENSORSET / SET ratio of a server that forwards the tensor.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support import free_port, wait_for_port

CHUNK = 256 * 1024


def _pump(source: socket.socket, sink: socket.socket) -> None:
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    try:
        while count := source.recv_into(buffer):
            sink.sendall(view[:count])
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve_one(client: socket.socket, upstream_port: int) -> None:
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
    _pump(client, upstream)


def serve(port: int, upstream_port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(client, upstream_port), daemon=True).start()


@contextmanager
def running(upstream_port: int) -> Iterator[tuple[int, int]]:
    """A forwarder to the store at ``upstream_port``, as its own process; yields its port and process id."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.relay_floor", "--port", str(port), "--upstream-port",
                             str(upstream_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=30)
        yield port, proc.pid
    finally:
        proc.kill()
        proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    args = parser.parse_args()
    serve(args.port, args.upstream_port)


if __name__ == "__main__":
    main()
