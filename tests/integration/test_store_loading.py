"""A real redis-server still loading its dataset after a restart: every AI command passes its ``-LOADING``
reply through, never WRONGTYPE or ``cannot find run info`` (which would tell the client its key is corrupt).

The store is made to load for minutes (``key-load-delay``: each key of the RDB waits 100 ms, so 3,000 keys
take ~300 s, far longer than the checks; ``loading-process-events-interval-bytes`` keeps it answering
meanwhile), then killed by its pid: no check waits for the clock.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from server.config import Config
from tests.models import torch_add
from tests.scripts import SCRIPT
from tests.support import free_port, redis_server_binary, running_server, wait_for_port, wait_until

KEYS_IN_THE_RDB = 3000
LOAD_DELAY_US = 100_000  # per key: the restarted store stays in its loading state for ~300 s


def _redis_server(port: int, workdir: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@contextmanager
def _store_that_restarts_loading() -> Iterator[tuple[str, Callable[[], None]]]:
    """A redis-server with a model, a script, a tensor and KEYS_IN_THE_RDB keys; ``restart()`` saves it, stops it
    and starts it again on the same port, where it then loads that RDB slowly."""
    redis_server_binary()
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        procs = [_redis_server(port, workdir)]
        try:
            wait_for_port(port)

            def restart() -> None:
                direct = redis.Redis(port=port)
                pipe = direct.pipeline(transaction=False)
                for i in range(KEYS_IN_THE_RDB):
                    pipe.set(f"filler:{i}", os.urandom(1500))  # incompressible, over the events interval: answers after each key
                pipe.execute()
                direct.save()
                direct.shutdown(nosave=True)
                procs[0].wait(10)
                procs.append(_redis_server(port, workdir, "--key-load-delay", str(LOAD_DELAY_US),
                                           "--loading-process-events-interval-bytes", "1024"))
                wait_for_port(port)
                assert wait_until(lambda: _loading(port))

            yield f"redis://127.0.0.1:{port}", restart
        finally:
            for proc in procs:
                _stop(proc)


def _loading(port: int) -> bool:
    """``INFO persistence`` says ``loading:1`` (asked over a plain socket: redis-py's handshake would be refused
    while the store loads)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"INFO persistence\r\n")
            return b"loading:1" in sock.recv(65536)
    except OSError:
        return False


def _request(*parts: object) -> bytes:
    args = [part if isinstance(part, bytes) else str(part).encode() for part in parts]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


COMMANDS = (
    ("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b"),
    ("AI.MODELRUN", "m", "INPUTS", "a", "a", "OUTPUTS", "b"),
    ("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b"),
    ("AI.DAGEXECUTE", "LOAD", 1, "a", "|>", "AI.TENSORGET", "a", "VALUES"),
    ("AI.DAGEXECUTE", "LOAD", 1, "a", "|>", "AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b"),
    ("AI.MODELGET", "m", "META"), ("AI.SCRIPTGET", "s"), ("AI.TENSORGET", "a", "VALUES"),
    ("AI.INFO", "m"), ("AI.INFO", "s", "RESETSTAT"), ("AI.MODELDEL", "m"), ("AI.SCRIPTDEL", "s"),
    ("AI._MODELSCAN",), ("AI._SCRIPTSCAN",), ("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2),
    ("AI.MODELSTORE", "m2", "TORCH", "CPU", "BLOB", torch_add()),
    ("AI.SCRIPTSTORE", "s2", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT),
)


def test_a_restarted_store_still_loading_answers_loading_to_every_ai_command() -> None:
    with _store_that_restarts_loading() as (url, restart), running_server(Config(port=0, redis_url=url)) as server:
        conn = server.client()
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
        conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
        conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b")  # cached metadata
        restart()
        answers = []
        for command in COMMANDS:
            raw = server.raw()  # redis-py would retry LOADING for seconds; the raw reply is what is checked
            raw.send(_request(*command))
            answers.append((command[:2], raw.read_until(b"\r\n")[:120]))
        assert all(answer.startswith(b"-LOADING") for _command, answer in answers), answers
        raw = server.raw()  # inside MULTI the store refuses to queue it: LOADING, then EXECABORT
        raw.send(b"MULTI\r\n" + _request("AI.TENSORGET", "a", "VALUES") + b"EXEC\r\n")
        assert raw.read_until(b"EXECABORT").startswith(b"+OK\r\n-LOADING")
