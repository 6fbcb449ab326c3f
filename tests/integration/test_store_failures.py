"""The backing Redis misbehaving: a login that never completes, a store that goes away mid-session."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
import redis

from backends.errors import AIError
from server.config import Config
from server.store.redis import RedisStore
from tests.support import free_port, redis_server_process, running_server


def _listener(handle: Callable[[socket.socket, threading.Event], None]) -> tuple[int, threading.Event]:
    """A loopback TCP listener that hands every connection to ``handle`` (in its own thread) until stopped."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=handle, args=(conn, stop), daemon=True).start()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1]), stop


def _hang_up_listener() -> tuple[int, threading.Event]:
    """A TCP listener that accepts every connection and closes it at once."""
    return _listener(lambda conn, _stop: conn.close())


def test_a_dropped_login_fails_fast_instead_of_hanging() -> None:
    port, stop = _hang_up_listener()
    try:
        store = RedisStore(f"redis://:secret@127.0.0.1:{port}/2")
        # the dropped login itself answers (a hang would end in the connect timeout's other text)
        with pytest.raises(AIError, match="backing store unavailable: connection lost during login"):
            asyncio.run(store.start())
    finally:
        stop.set()


def test_unreachable_store_stops_the_cli_with_a_message() -> None:
    dead = free_port()
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--redis-url",
                          f"redis://127.0.0.1:{dead}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "redisai-server:" in out.stderr


def test_store_going_away_closes_the_client_and_the_server_lives_on() -> None:
    with redis_server_process() as url, running_server(Config(port=0, redis_url=url)) as server:
        conn = server.client()
        conn.set("k", "v")
        direct = redis.Redis.from_url(url)
        direct.shutdown(nosave=True)
        time.sleep(0.3)
        with pytest.raises((redis.ConnectionError, redis.ResponseError)):
            redis.Redis(port=server.port, protocol=2, socket_timeout=5).get("k")
        assert server.client().ping() is True


def test_database_of_the_store_url_is_every_clients_default(real_redis_url: str) -> None:
    direct = redis.Redis.from_url(real_redis_url, db=3)
    direct.flushdb()
    with running_server(Config(port=0, redis_url=f"{real_redis_url}/3")) as server:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1)
        conn.set("plain", "1")
        assert conn.exists("t") == 1  # relayed EXISTS and the AI write agree on the database
        assert direct.exists("t", "plain") == 2
        assert int(conn.client_info()["db"]) == 3


LOADING = b"-LOADING Valkey is loading the dataset in memory\r\n"


def _loading_store() -> tuple[int, threading.Event]:
    """A store that has just restarted and is still loading: PONG to PING, LOADING to everything else."""
    return _listener(_answer_loading)


def _answer_loading(conn: socket.socket, stop: threading.Event) -> None:
    import hiredis

    reader = hiredis.Reader()
    conn.settimeout(0.2)
    while not stop.is_set():
        try:
            data = conn.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return
        if not data:
            return
        reader.feed(data)
        while (request := reader.gets()) is not False:
            conn.sendall(b"+PONG\r\n" if request[0].upper() == b"PING" else LOADING)


def test_a_loading_store_is_reported_as_loading_never_as_a_wrong_type() -> None:
    port, stop = _loading_store()
    try:
        with running_server(Config(port=0, redis_url=f"redis://127.0.0.1:{port}")) as server:
            raw = server.raw()  # redis-py would retry LOADING for seconds; the raw reply is what is checked
            for command in (("AI.MODELEXECUTE", "m", "INPUTS", 1, "a", "OUTPUTS", 1, "b"),
                            ("AI.SCRIPTEXECUTE", "s", "f", "INPUTS", 1, "a", "OUTPUTS", 1, "b"),
                            ("AI.DAGEXECUTE", "LOAD", 1, "a", "|>", "AI.TENSORGET", "a", "VALUES"),
                            ("AI.MODELGET", "m"), ("AI.SCRIPTGET", "s"), ("AI.TENSORGET", "a", "VALUES"),
                            ("AI.MODELDEL", "m"), ("AI.TENSORSET", "a", "FLOAT", 1, "VALUES", 1)):
                args = [str(part).encode() for part in command]
                request = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
                assert raw.call(request, LOADING) == LOADING, command
    finally:
        stop.set()
