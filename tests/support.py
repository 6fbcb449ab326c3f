"""Test helpers: a real redis-server, our server running in a thread, raw RESP sockets."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis

from server.app import Server
from server.config import Config


def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Poll ``check`` until it holds or ``timeout`` passes (a bound, never a speed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


@contextmanager
def server_process(*args: str, env: dict[str, str] | None = None,
                   new_session: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m server ARGS`` as a real process (killed by its pid if it is still running at the end);
    ``new_session``: in a session and process group of its own, as a terminal's job is (os.killpg)."""
    proc = subprocess.Popen([sys.executable, "-m", "server", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=new_session)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def child_pids(parent: int) -> list[int]:
    """Running (not zombie) processes whose parent is ``parent``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _proc_stat(int(entry))
            if fields and fields[1] == str(parent) and fields[0] != "Z":
                found.append(int(entry))
    return found


def process_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a dead child nobody has reaped yet)."""
    fields = _proc_stat(pid)
    return bool(fields) and fields[0] != "Z"


def _proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, ppid, ... ([] when there is no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


@contextmanager
def redis_server_process() -> Iterator[str]:
    """Start a throw-away redis-server on a free loopback port; yield its URL; stop it by its pid."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", workdir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port)
            yield f"redis://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@dataclass
class RunningServer:
    """Our server on a free port, in its own thread and event loop."""

    server: Server
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    port: int

    def client(self, protocol: int = 2, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=protocol, socket_timeout=10, **kwargs)

    def raw(self) -> RawClient:
        return RawClient(self.port)


@contextmanager
def running_server(config: Config, plain_asyncio: bool = False) -> Iterator[RunningServer]:
    """Start ``Server(config)`` in a thread (port 0 → a free port) and stop it gracefully afterwards; on uvloop,
    as ``python -m server`` runs, unless ``plain_asyncio`` (the asyncio event loop it falls back to)."""
    try:
        if plain_asyncio:
            raise ImportError
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    server = Server(config)
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:
            failure.append(exc)
            started.set()
            return
        started.set()
        loop.run_until_complete(server.run_until_stopped())

    thread = threading.Thread(target=run, name="redisai-test-server", daemon=True)
    thread.start()
    started.wait(30)
    if failure:
        raise failure[0]
    try:
        yield RunningServer(server, loop, thread, server.ports[0])
    finally:
        loop.call_soon_threadsafe(server.stop)
        thread.join(30)
        loop.close()


def assert_overlapped(server: RunningServer, first: str, second: str) -> None:
    """The last calls on two device queues ran at the same time: each started before the other ended (the
    stamps the workers record; no wall-clock threshold, so a loaded machine cannot fail it)."""
    queues = server.server.ctx.ai.queues.queues
    (start_a, end_a), (start_b, end_b) = queues[first].recent[-1], queues[second].recent[-1]
    assert start_a < end_b and start_b < end_a, f"{first} ran {start_a:.4f}-{end_a:.4f}, {second} {start_b:.4f}-{end_b:.4f}"


@contextmanager
def loop_held(server: RunningServer) -> Iterator[None]:
    """The server's event loop stopped in a callback until the block ends: what is sent meanwhile is read in
    one loop iteration after it (the pipelined runs of one connection run one after the other; those of
    several connections, together)."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(30)

    server.loop.call_soon_threadsafe(hold)
    assert holding.wait(30)
    try:
        yield
    finally:
        release.set()


class RawClient:
    """A plain socket speaking RESP bytes, for asserting exact wire replies."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_exactly(self, expected: bytes, timeout: float = 10.0) -> bytes:
        """Read until ``len(expected)`` bytes arrived (or the peer closed); return what came."""
        data = b""
        deadline = time.monotonic() + timeout
        while len(data) < len(expected) and time.monotonic() < deadline:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    def read_until(self, marker: bytes, timeout: float = 10.0) -> bytes:
        """Read until ``marker`` appears (or ``timeout`` passes, or the peer closed); return what came."""
        data = b""
        deadline = time.monotonic() + timeout
        while marker not in data and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
        self.sock.settimeout(10)
        return data

    def call(self, data: bytes, expected: bytes) -> bytes:
        self.send(data)
        return self.read_exactly(expected)

    def switch_to_resp3(self) -> None:
        """HELLO 3, its map reply read and dropped (its exact length varies with the server)."""
        self.send(b"HELLO 3\r\n")
        self.read_exactly(b"%8\r\n")
        self.sock.settimeout(0.3)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            pass
        self.sock.settimeout(10)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def run_in_threads(target: Callable[[int], None], count: int, timeout: float = 60.0) -> bool:
    """``target(0)`` … ``target(count - 1)``, each on its own thread, all at once; True when every one ended
    within ``timeout`` seconds (the caller collects what they found)."""
    threads = [threading.Thread(target=target, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return not any(thread.is_alive() for thread in threads)


def ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def redis_server_binary() -> str:
    """Debian's redis-server: CI must provide it (its absence fails there), elsewhere its tests are skipped."""
    return ci_tool("redis-server")


def ci_tool(name: str) -> str:
    """A Debian package's program that ``.ci/run`` installs: its absence fails the test in CI, and skips it
    elsewhere (a developer machine without it)."""
    binary = shutil.which(name)
    if binary is None:
        missing_outside_ci(f"{name} (apt-get install {name})", f"{name} is not installed here; CI installs it")
    return binary


def missing_outside_ci(what: str, why_skipped: str) -> NoReturn:
    """Something CI always provides is missing: the test fails in CI (``what`` it must provide) and is skipped
    elsewhere (``why_skipped``), never skipped where CI runs it."""
    if ci():
        pytest.fail(f"CI must provide {what}")
    pytest.skip(why_skipped)


def run_client_script(python: Path, script: str, *args: object, expect: str) -> None:
    """Run ``script`` with another interpreter (the redisai client's virtualenv) and check it printed ``expect``."""
    result = subprocess.run([str(python), "-c", script, *(str(a) for a in args)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert expect in result.stdout, result.stdout
