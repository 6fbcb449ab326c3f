"""Fixtures: every integration test runs once on the embedded store and once on a real redis-server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from server.compiled import hot_module_builds
from server.config import Config
from server.store.embedded import EmbeddedStore
from tests.cluster_support import LocalCluster, local_cluster
from tests.support import RunningServer, redis_server_binary, redis_server_process, running_server


@pytest.fixture(scope="session")
def real_redis_url() -> Iterator[str]:
    """The real Redis: CI's (REDISAI_TEST_REDIS_URL), else one the tests start themselves."""
    url = os.environ.get("REDISAI_TEST_REDIS_URL")
    if url:
        yield url
        return
    redis_server_binary()
    with redis_server_process() as started:
        yield started


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A real Redis Cluster (3 primaries, 3 replicas) of valkey-server nodes, started once per test session."""
    with local_cluster(primaries=3, replicas=1) as cluster:
        yield cluster


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test a compiled build older than its sources: the old code would run (server/compiled.py)."""
    stale = [build.name for build in hot_module_builds() if build.stale]
    if stale and os.environ.get("REDISAI_PURE_PYTHON") != "1":
        pytest.exit(f"compiled modules older than their sources ({', '.join(stale)}): run `make compile`, "
                    "or test the sources with REDISAI_PURE_PYTHON=1", returncode=4)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses a server runs on the embedded store and on a real Redis; the modules that set
    ``RUNS_ON_CLUSTER = True`` (the AI command families) also on a 3-primary Redis Cluster, keys spread."""
    if "store_url" in metafunc.fixturenames:
        on_cluster = getattr(metafunc.module, "RUNS_ON_CLUSTER", False) and \
            metafunc.definition.get_closest_marker("single_node") is None
        stores = ["embedded", "redis"] + (["cluster"] if on_cluster else [])
        metafunc.parametrize("store_url", stores, indirect=True)


@pytest.fixture
def store_url(request: pytest.FixtureRequest) -> str:
    """'' for the embedded store, or the URL of a real, freshly flushed redis-server (or cluster node)."""
    if request.param == "embedded":
        return ""
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        return cluster.seed_url
    url: str = request.getfixturevalue("real_redis_url")
    direct = redis.Redis.from_url(url)
    direct.flushall()
    direct.close()
    return url


@pytest.fixture
def server(store_url: str) -> Iterator[RunningServer]:
    with running_server(Config(port=0, redis_url=store_url, shutdown_timeout=2.0)) as running:
        yield running


def _store_url(server: RunningServer, store_url: str) -> str:
    store = server.server.ctx.store
    return f"unix://{store.process.socket_path}" if isinstance(store, EmbeddedStore) else store_url


@pytest.fixture
def shared_store(server: RunningServer, store_url: str) -> Iterator[tuple[redis.Redis, redis.Redis, Any]]:
    """A client of our server, one of a second server on the same store, and one of the store itself."""
    url = _store_url(server, store_url)
    with running_server(Config(port=0, redis_url=url, shutdown_timeout=2.0)) as other:
        on_cluster = server.server.ctx.store.kind == "cluster"
        direct: Any = RedisCluster.from_url(url) if on_cluster else redis.Redis.from_url(url)
        yield server.client(), other.client(), direct


@pytest.fixture
def client(server: RunningServer) -> Iterator[redis.Redis]:
    conn = server.client()
    yield conn
    conn.close()


CLIENTS = Path(__file__).resolve().parents[1] / ".clients"
REDISAI_REQUIREMENTS = ("redisai==1.3.0", "numpy<2")
SMARTREDIS_REQUIREMENTS = ("smartredis==0.6.1", "numpy==1.26.4")  # smartredis 0.6.1 needs numpy<2


def _client_venv(name: str, requirements: tuple[str, ...]) -> Path:
    """The interpreter of the virtualenv .clients/NAME holding ``requirements``: made once and kept (remade when
    the requirements change)."""
    venv = CLIENTS / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = " ".join(requirements)
    if not marker.exists() or marker.read_text() != wanted:
        shutil.rmtree(venv, ignore_errors=True)
        CLIENTS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *requirements], check=True, timeout=900)
        marker.write_text(wanted)
    return python


@pytest.fixture(scope="session")
def redisai_python() -> Path:
    """The ``redisai`` client's own interpreter (redisai 1.3.0 pins redis 4.x and numpy<2, which this
    project's environment does not have); the virtualenv .clients/redisai-venv is made once and kept."""
    return _client_venv("redisai-venv", REDISAI_REQUIREMENTS)


@pytest.fixture(scope="session")
def smartredis_python() -> Path:
    """SmartSim's ``smartredis`` client (0.6.1: a compiled C++ client, numpy<2) in its own virtualenv,
    .clients/smartredis-venv, made once and kept. No torch there: set_function only sends a function's source."""
    return _client_venv("smartredis-venv", SMARTREDIS_REQUIREMENTS)
