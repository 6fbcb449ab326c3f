"""/healthz and /readyz on the metrics port, against real server processes and a real store that goes away."""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from server.config import Config
from server.store.process import find_store_binary
from tests import models
from tests.cluster_support import LocalCluster
from tests.support import free_port, redis_server_binary, running_server, server_process, wait_for_port, wait_until


def http_get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET ``path`` on the metrics port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return int(response.status), str(response.read().decode())
    except urllib.error.HTTPError as exc:
        return int(exc.code), str(exc.read().decode())


@contextmanager
def redis_on_port(port: int, workdir: str, binary: str | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A real redis-server (or ``binary``) on ``port``, so a store can be stopped and another started at the same
    address."""
    binary = binary or redis_server_binary()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def test_store_killed_readyz_503_with_reason_healthz_200_and_ping_pong(tmp_path: Path) -> None:
    store_port, port, metrics = free_port(), free_port(), free_port()
    logfile = tmp_path / "server.log"
    with tempfile.TemporaryDirectory() as workdir:
        with redis_on_port(store_port, workdir) as store, \
                server_process("--port", str(port), "--metrics-port", str(metrics), "--logfile", str(logfile),
                               "--redis-url", f"redis://127.0.0.1:{store_port}"):
            wait_for_port(metrics, timeout=30)
            assert http_get(metrics, "/readyz") == (200, "ready\n")
            before = redis.Redis(port=port, protocol=2, socket_timeout=10).info("server")
            assert before["store_version"].startswith("redis ")
            store.kill()
            store.wait(10)
            assert wait_until(lambda: http_get(metrics, "/readyz")[0] == 503)
            status, body = http_get(metrics, "/readyz")
            assert status == 503 and body.startswith("not ready: the store is unavailable"), body
            assert http_get(metrics, "/healthz") == (200, "ok\n")
            conn = redis.Redis(port=port, protocol=2, socket_timeout=10)
            assert conn.ping() is True  # PING keeps its Redis meaning: this process answers
            with pytest.raises(redis.RedisError, match="backing store unavailable"):
                conn.set("k", "v")
            assert wait_until(lambda: "store lost" in logfile.read_text())
            with redis_on_port(store_port, workdir, find_store_binary("")):  # back as a Valkey (the bundled one)
                assert wait_until(lambda: http_get(metrics, "/readyz") == (200, "ready\n"))
                assert wait_until(lambda: "store regained" in logfile.read_text())
                fresh = redis.Redis(port=port, protocol=2, socket_timeout=10)
                assert fresh.set("k", "v") is True
                assert wait_until(lambda: fresh.info("server")["store_version"].startswith("valkey "))
                assert fresh.info("server")["redis_version"] == redis.Redis(port=port, protocol=3).execute_command(
                    "HELLO", 3)[b"version"].decode()
    log = logfile.read_text()
    lost = next(line for line in log.splitlines() if "store lost" in line)
    assert f"store=redis://127.0.0.1:{store_port}" in lost and "reason=" in lost


def test_readyz_names_a_backend_the_stored_models_need_that_cannot_load() -> None:
    metrics = free_port()
    with running_server(Config(port=0, metrics_port=metrics)) as server:
        conn = server.client()
        assert http_get(metrics, "/readyz") == (200, "ready\n")
        # a model another server stored with a backend this one cannot load
        conn.hset("foreign", mapping={"__redisai__": "model", "backend": "MXNET", "device": "CPU"})
        status, body = http_get(metrics, "/readyz")
        assert status == 503, body
        assert body == "not ready: backend MXNET (needed by 'foreign') cannot be loaded: ERR Could not load backend\n"
        assert http_get(metrics, "/healthz") == (200, "ok\n")
        conn.delete("foreign")
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
        assert wait_until(lambda: http_get(metrics, "/readyz") == (200, "ready\n"))  # TORCH loads
        assert "TORCH" in server.server.ctx.ai.backends.loaded()


def test_readyz_in_another_database_and_unknown_paths() -> None:
    metrics = free_port()
    with running_server(Config(port=0, metrics_port=metrics)) as server:
        other = server.client(db=5)
        other.hset("far", mapping={"__redisai__": "model", "backend": "NOPE", "device": "CPU"})
        status, body = http_get(metrics, "/readyz")
        assert status == 503 and "backend NOPE (needed by 'far')" in body
        assert http_get(metrics, "/nothing-here")[0] == 404
        request = urllib.request.Request(f"http://127.0.0.1:{metrics}/healthz", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405


def test_readyz_on_a_cluster_sees_every_shard(redis_cluster: LocalCluster) -> None:
    redis_cluster.flush()
    metrics = free_port()
    with running_server(Config(port=0, redis_url=redis_cluster.seed_url, metrics_port=metrics)) as server:
        assert http_get(metrics, "/readyz") == (200, "ready\n")
        assert server.client().info("server")["redis_version"] == redis_cluster.primaries()[0].client().info(
            "server")["redis_version"]
        conn = server.client()
        for index in range(6):  # keys over the shards; only one names a backend nobody has
            backend = "NOPE" if index == 4 else "TORCH"
            conn.execute_command("HSET", f"obj{index}", "__redisai__", "model", "backend", backend)
        status, body = http_get(metrics, "/readyz")
        assert status == 503 and "backend NOPE (needed by 'obj4') cannot be loaded" in body, body


def test_sigterm_right_after_the_first_pong_never_waits_on_the_store_watch() -> None:
    """The store watch starts with the listeners; a stop that comes at once must still end the process (it hung
    when the watch's first PING and its cancellation met)."""
    for _ in range(5):
        port = free_port()
        with server_process("--port", str(port), "--log-level", "warning") as proc:
            assert _first_pong(port)  # asked every millisecond: the stop lands while the watch's first PING is out
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0


def _first_pong(port: int, attempts: int = 30_000) -> bool:
    """PING the port every millisecond (at most ``attempts`` times, each connect bounded) until +PONG comes back."""
    for _ in range(attempts):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return True
        except OSError:
            time.sleep(0.001)
    return False
