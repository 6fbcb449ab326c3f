"""``--workers N`` owns its port once (server/port_owner.py): a second supervisor on a port in use is refused with
a single process's EADDRINUSE message and exit status 1, and the first keeps serving one store's data."""

from __future__ import annotations

import subprocess
import sys

import redis

from tests.support import child_pids, free_port, server_process, wait_for_port, wait_until


def test_a_second_supervisor_on_the_same_port_is_refused_and_the_first_keeps_serving() -> None:
    port = free_port()
    with server_process("--port", str(port), "--workers", "2") as first:
        wait_for_port(port)
        assert wait_until(lambda: len(child_pids(first.pid)) == 3)  # the store and two workers
        second = subprocess.run([sys.executable, "-m", "server", "--port", str(port), "--workers", "2"],
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stderr[-2000:]
        assert (f"redisai-server: [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
                "address already in use") in second.stderr
        assert first.poll() is None
        redis.Redis(port=port).set("k", "fromA")
        for _ in range(12):  # fresh connections, spread over the first server's workers: one store behind them all
            conn = redis.Redis(port=port)
            assert conn.get("k") == b"fromA"
            conn.close()


def test_a_single_process_cannot_take_the_port_of_a_supervisor() -> None:
    port = free_port()
    with server_process("--port", str(port), "--workers", "2") as first:
        wait_for_port(port)
        single = subprocess.run([sys.executable, "-m", "server", "--port", str(port)], capture_output=True,
                                text=True, timeout=120)
        assert single.returncode == 1 and "address already in use" in single.stderr, single.stderr[-2000:]
        assert first.poll() is None
