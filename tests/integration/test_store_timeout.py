"""Every store link has a time limit (server/store/stall_watch.py, ``--store-timeout-ms``): a store that stops
answering (SIGSTOP of a real redis-server or of the embedded store, a listener that accepts and never replies)
fails the commands waiting on it, the link comes back with the store, blocking commands keep their own timeouts,
and a start that waits on such a store is bounded and stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from server.config import Config
from tests.support import RawClient, free_port, redis_server_binary, running_server, wait_for_port, wait_until

TIMEOUT_MS = 1000
UNAVAILABLE = f"did not answer within {TIMEOUT_MS} ms (--store-timeout-ms)"


@contextmanager
def redis_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A throw-away redis-server (its process, to stop and resume by pid) and its URL."""
    binary = redis_server_binary()  # CI installs it: missing there, the test fails
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                 "no", "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            yield proc, f"redis://127.0.0.1:{port}"
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            proc.wait(timeout=10)


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` (a store this test started) stopped with SIGSTOP, and always resumed."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextmanager
def silent_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """A port that accepts connections and never replies, and the connections it holds until the end."""
    held: list[socket.socket] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1]), held
    finally:
        done.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def _error_of(client: redis.Redis, *command: object) -> str:
    with pytest.raises(redis.exceptions.ResponseError) as caught:
        client.execute_command(*command)
    return str(caught.value)


def _fails_then_recovers(server_port: int, pid: int) -> None:
    client = redis.Redis(port=server_port, socket_timeout=30, protocol=2)
    client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    client.set("k", "v")
    raw = RawClient(server_port)  # no CLIENT SETINFO: its relayed commands take the shared relay
    with stopped(pid):
        assert UNAVAILABLE in _error_of(client, "AI.TENSORGET", "a", "VALUES")
        raw.send(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        assert UNAVAILABLE.encode() in raw.read_until(b"\r\n", timeout=30)
    raw.close()
    # the store is back: the links connect anew
    assert wait_until(lambda: _answers(client))
    assert client.get("k") == b"v"


def _answers(client: redis.Redis) -> bool:
    try:
        return client.execute_command("AI.TENSORGET", "a", "VALUES") == [b"1", b"2"]
    except redis.exceptions.ResponseError:
        return False


def test_a_stopped_redis_server_fails_waiting_commands_and_the_link_comes_back() -> None:
    with redis_server() as (store, url), running_server(Config(port=0, redis_url=url,
                                                               store_timeout_ms=TIMEOUT_MS)) as server:
        _fails_then_recovers(server.port, store.pid)


def test_a_stopped_embedded_store_fails_waiting_commands_and_the_link_comes_back() -> None:
    with running_server(Config(port=0, store_timeout_ms=TIMEOUT_MS)) as server:
        _fails_then_recovers(server.port, server.server.ctx.store.process.pid)  # type: ignore[attr-defined]


def test_blocking_commands_keep_their_timeout_and_fail_when_the_store_stops() -> None:
    with redis_server() as (store, url), running_server(Config(port=0, redis_url=url,
                                                               store_timeout_ms=TIMEOUT_MS)) as server:
        client = redis.Redis(port=server.port, socket_timeout=30)
        assert client.blpop(["nothing"], timeout=3) is None  # three timeouts' wait: answered nil, not cut
        waiting = redis.Redis(port=server.port, socket_timeout=30)
        outcome: list[object] = []
        thread = threading.Thread(target=lambda: outcome.append(_blpop_forever(waiting)))
        thread.start()
        assert wait_until(lambda: b"blpop" in client.execute_command("CLIENT", "LIST"))
        client.rpush("late", "x")
        assert client.lpop("late") == b"x"  # the store answers: BLPOP 0 keeps waiting
        assert thread.is_alive()
        with stopped(store.pid):
            thread.join(30)
        assert outcome and UNAVAILABLE in str(outcome[0])


def _blpop_forever(client: redis.Redis) -> object:
    try:
        return client.blpop(["never"], timeout=0)
    except redis.exceptions.RedisError as exc:
        return exc


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "server", "--port", str(free_port()), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_start_on_a_stopped_store_or_a_silent_listener_exits_with_one_line() -> None:
    with redis_server() as (store, url), stopped(store.pid):
        proc = _start("--redis-url", url, "--store-timeout-ms", str(TIMEOUT_MS))
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert f"redisai-server: store at {url} did not answer within {TIMEOUT_MS} ms" in err, err
    with silent_listener() as (port, _held):
        proc = _start("--redis-url", f"redis://127.0.0.1:{port}", "--store-timeout-ms", str(TIMEOUT_MS))
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and f"did not answer within {TIMEOUT_MS} ms" in err, err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_start_that_waits_on_the_store(signum: int) -> None:
    with silent_listener() as (port, held):
        proc = _start("--redis-url", f"redis://127.0.0.1:{port}", "--store-timeout-ms", "600000")
        try:
            assert wait_until(lambda: bool(held), 60)  # connected: it waits for the store's first answer
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == 0, err
        assert "stopped while starting" in err


def test_a_service_that_is_not_redis_gives_one_line_and_no_traceback() -> None:
    with socket.socket() as http:
        http.bind(("127.0.0.1", 0))
        http.listen(4)
        port = http.getsockname()[1]
        done = threading.Event()

        def answer_http() -> None:
            http.settimeout(0.2)
            while not done.is_set():
                try:
                    conn = http.accept()[0]
                except OSError:
                    continue
                conn.recv(1024)
                conn.sendall(b"<html><body>not redis</body></html>\r\n")
                conn.close()

        thread = threading.Thread(target=answer_http, daemon=True)
        thread.start()
        try:
            proc = _start("--redis-url", f"redis://127.0.0.1:{port}", "--store-timeout-ms", str(TIMEOUT_MS))
            _, err = proc.communicate(timeout=60)
        finally:
            done.set()
            thread.join(5)
    assert proc.returncode == 1
    assert "Traceback" not in err and "Fatal error" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("redisai-server:")]
    assert len(lines) == 1 and "not a Redis server" in lines[0], err
