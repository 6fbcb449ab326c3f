"""Big arguments read straight into place (server/frontend/bulk_reader.py), on uvloop and on asyncio's own loop.

A client's big bulk is received by a ``BulkReader`` that the connection installs as its transport's protocol
at its first big bulk, and keeps while big bulks keep coming. These tests send such bulks the ways a client can: slowly and in odd pieces, with
commands pipelined before and after, and cut off halfway; other clients are served meanwhile.
"""

from __future__ import annotations

import gc
import random
import socket
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from server.config import Config
from server.frontend.bulk_reader import BulkReader
from server.frontend.connection import ClientConnection
from server.store.upstream import pack_command
from tests.support import RunningServer, running_server


@pytest.fixture(params=["uvloop", "asyncio"])
def any_loop_server(request: pytest.FixtureRequest, store_url: str) -> Iterator[RunningServer]:
    config = Config(port=0, redis_url=store_url, shutdown_timeout=2.0)
    with running_server(config, plain_asyncio=request.param == "asyncio") as running:
        yield running


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition()`` until it holds, a bounded number of times (no clock is read or asserted)."""
    for _ in range(2000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def _received(sock: socket.socket, size: int) -> bytes:
    """Read until ``size`` bytes came (or the peer closed); what came."""
    got = b""
    while len(got) < size:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    return got


def _arriving(server: RunningServer) -> int:
    """How many clients have a big bulk arriving now."""
    return sum(conn.parser.big_arriving() for conn in list(server.server.ctx.clients.values())
               if isinstance(conn, ClientConnection))


def _readers(server: RunningServer) -> int:
    """How many clients' transports have a ``BulkReader`` as their protocol now."""
    connections = [conn for conn in list(server.server.ctx.clients.values()) if isinstance(conn, ClientConnection)]
    return sum(isinstance(conn.transport.get_protocol(), BulkReader)
               for conn in connections if conn.transport is not None)


def test_a_big_tensor_sent_slowly_in_odd_pieces_is_read_in_place_and_whole(any_loop_server: RunningServer) -> None:
    image = np.random.default_rng(3).random((1, 3, 224, 224), dtype=np.float32)
    payload = image.tobytes()
    request = (pack_command([b"PING"]) + pack_command([b"AI.TENSORSET", b"img", b"FLOAT", b"1", b"3", b"224", b"224",
                                                        b"BLOB", payload])
               + pack_command([b"AI.TENSORGET", b"img", b"META"]) + pack_command([b"ECHO", b"after"]))
    start = request.index(payload)
    sock = socket.create_connection(("127.0.0.1", any_loop_server.port), timeout=10)
    other = any_loop_server.client()
    sock.sendall(request[: start + 1000])
    _wait_for(lambda: _readers(any_loop_server) == 1 and _arriving(any_loop_server) == 1, "the bulk read in place")
    pieces = random.Random(7)
    at = start + 1000
    while at < len(request):
        size = pieces.choice([1, 3, 4096, 65_537, 150_000])
        sock.sendall(request[at : at + size])
        at += size
        assert other.ping()  # another client is answered while the bulk arrives
    expected = (b"+PONG\r\n+OK\r\n*4\r\n$5\r\ndtype\r\n$5\r\nFLOAT\r\n$5\r\nshape\r\n*4\r\n:1\r\n:3\r\n:224\r\n:224\r\n"
                b"$5\r\nafter\r\n")
    assert _received(sock, len(expected)) == expected
    assert _arriving(any_loop_server) == 0
    stored = other.execute_command("AI.TENSORGET", "img", "BLOB")
    assert stored == payload
    second = payload[::-1]  # the next one at once (through the reader's own reads, or plain ones: the small reads
    # after the first may have handed the protocol back), then in place
    sock.sendall(pack_command([b"AI.TENSORSET", b"img2", b"FLOAT", b"1", b"3", b"224", b"224", b"BLOB", second])
                 + pack_command([b"PING"]))
    assert _received(sock, len(b"+OK\r\n+PONG\r\n")) == b"+OK\r\n+PONG\r\n"
    assert other.execute_command("AI.TENSORGET", "img2", "BLOB") == second
    sock.close()
    other.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_client_gone_halfway_through_a_big_bulk_is_forgotten_and_the_others_served(
        any_loop_server: RunningServer) -> None:
    """The half-filled argument is let go with its client: collecting the connection's cycle finalizes it
    cleanly (no ignored BufferError from the bytes it was being read into)."""
    conn = any_loop_server.client()
    before = int(conn.info("clients")["connected_clients"])
    sock = socket.create_connection(("127.0.0.1", any_loop_server.port), timeout=10)
    sock.sendall(pack_command([b"SET", b"half", bytes(2_000_000)])[:1_000_000])
    _wait_for(lambda: _readers(any_loop_server) == 1 and _arriving(any_loop_server) == 1, "the bulk read in place")
    sock.close()
    _wait_for(lambda: int(conn.info("clients")["connected_clients"]) == before, "the client gone")
    gc.collect()
    assert conn.exists("half") == 0
    assert conn.set("whole", b"x" * 300_000) and conn.get("whole") == b"x" * 300_000
    conn.close()


def test_pipelined_big_arguments_back_to_back_each_arrive_whole(any_loop_server: RunningServer) -> None:
    """Several big bulks in one stream, the end of one and the start of the next in the same read."""
    values = [random.Random(n).randbytes(70_000 + 50_000 * n) for n in range(5)]
    request = b"".join(pack_command([b"SET", b"k%d" % n, value]) for n, value in enumerate(values))
    request += pack_command([b"MGET", *(b"k%d" % n for n in range(5))])
    sock = socket.create_connection(("127.0.0.1", any_loop_server.port), timeout=10)
    sock.sendall(request)
    expected = b"+OK\r\n" * 5 + b"*5\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in values)
    assert _received(sock, len(expected)) == expected
    sock.close()


def test_big_replies_and_relayed_big_values_on_either_loop(any_loop_server: RunningServer) -> None:
    """A big blob reply is written as its own buffer where the transport can (uvloop), joined where not
    (asyncio's own loop): either way the replies arrive whole and in order. A batch that ends with a
    suppressed reply (CLIENT REPLY OFF) is finished and the connection still closes on QUIT. A big value
    relayed through the shared relay and through a client's own store connection (after SELECT) arrives whole."""
    blob = np.arange(20_000, dtype=np.float32).tobytes()
    conn = any_loop_server.client()
    assert conn.execute_command("AI.TENSORSET", "t", "FLOAT", 20_000, "BLOB", blob) == b"OK"
    bulk = b"$%d\r\n%s\r\n" % (len(blob), blob)
    sock = socket.create_connection(("127.0.0.1", any_loop_server.port), timeout=10)
    sock.sendall(b"PING\r\nAI.TENSORGET t BLOB\r\nAI.TENSORGET t BLOB\r\nCLIENT REPLY OFF\r\n")
    expected = b"+PONG\r\n" + bulk + bulk
    assert _received(sock, len(expected)) == expected
    sock.sendall(b"AI.TENSORGET t BLOB\r\nQUIT\r\n")
    assert sock.recv(65536) == b""  # nothing more, and closed
    sock.close()
    value = random.Random(7).randbytes(300_000)
    assert conn.set("shared", value) and conn.get("shared") == value
    session = any_loop_server.client(db=1)
    assert session.set("own", value) and session.get("own") == value
    session.close()
    conn.close()
