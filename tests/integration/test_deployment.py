"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the YAML's services, ports and
commands, and the exact server command lines of the compose file run against a real redis-server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
import yaml

from tests.cluster_support import LocalCluster
from tests.support import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_compose_services_ports_and_commands() -> None:
    services = _compose()["services"]
    redis_service, server, replica = services["redis"], services["redisai"], services["redisai-replica"]
    assert redis_service["image"].startswith("redis:")
    assert "--appendonly" in redis_service["command"] and "yes" in redis_service["command"]
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])
    assert server["ports"] == ["6379:6379"] and replica["ports"] == ["6380:6379"]
    assert replica["profiles"] == ["replicas"]
    for service in (server, replica):
        command = service["command"]
        assert command[command.index("--redis-url") + 1] == "redis://redis:6379/0"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert all(key.startswith("REDISAI_") for key in service["environment"])


def test_dockerfile_is_slim_non_root_with_a_ping_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "torch==2.13.0" in text
    assert "\nUSER redisai" in text and "useradd" in text
    assert "HEALTHCHECK" in text and "redis-cli" in text and "PING" in text
    assert 'ENTRYPOINT ["redisai-server"]' in text


@contextmanager
def _compose_server(service: dict[str, Any], redis_url: str, port: int) -> Iterator[int]:
    """The service's exact command line, with only the Redis host and the published port made local."""
    args = [str(arg) for arg in service["command"]]
    if redis_url:
        args[args.index("--redis-url") + 1] = args[args.index("--redis-url") + 1].replace("redis://redis:6379", redis_url)
    args[args.index("--port") + 1] = str(port)
    args[args.index("--bind") + 1] = "127.0.0.1"  # tests listen on loopback only
    env = {**os.environ, **{key: str(value) for key, value in service["environment"].items()}}
    proc = subprocess.Popen([sys.executable, "-m", "server", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=30)
        yield port
    finally:
        proc.terminate()
        assert proc.wait(20) == 0


def test_compose_command_lines_against_a_real_redis(real_redis_url: str) -> None:
    services = _compose()["services"]
    direct = redis.Redis.from_url(real_redis_url)
    direct.flushall()
    with _compose_server(services["redisai"], real_redis_url, free_port()) as first, \
            _compose_server(services["redisai-replica"], real_redis_url, free_port()) as second:
        one, two = redis.Redis(port=first, protocol=2), redis.Redis(port=second, protocol=2)
        assert one.execute_command("AI.TENSORSET", "shared", "FLOAT", 2, "VALUES", 1, 2) == b"OK"
        assert two.execute_command("AI.TENSORGET", "shared", "VALUES") == [b"1", b"2"]
        assert direct.exists("shared") == 1
        one.set("plain", "value")
        assert two.get("plain") == b"value"


def test_compose_cluster_profile_nodes_and_servers() -> None:
    services = _compose()["services"]
    nodes = [services[f"redis-c{i}"] for i in (1, 2, 3)]
    for node in nodes:
        assert node["profiles"] == ["cluster"]
        assert node["command"][node["command"].index("--cluster-enabled") + 1] == "yes"
    create = services["cluster-init"]["command"]
    assert create[:3] == ["redis-cli", "--cluster", "create"] and "--cluster-yes" in create
    assert [arg for arg in create if arg.startswith("redis-c") and arg.endswith(":6379")] == ["redis-c1:6379", "redis-c2:6379", "redis-c3:6379"]
    servers = [services["redisai-cluster-1"], services["redisai-cluster-2"]]
    assert [s["ports"] for s in servers] == [["6390:6379"], ["6391:6379"]]
    for server in servers:
        assert server["depends_on"]["cluster-init"]["condition"] == "service_completed_successfully"


def test_compose_cluster_servers_against_a_real_cluster(redis_cluster: LocalCluster) -> None:
    """The cluster profile's server command lines, with the node names made the local cluster's nodes."""
    redis_cluster.flush()
    services = _compose()["services"]
    local = {f"redis-c{i}:6379": f"127.0.0.1:{node.port}" for i, node in enumerate(redis_cluster.primaries(), 1)}
    started = []
    for name in ("redisai-cluster-1", "redisai-cluster-2"):
        service = dict(services[name])
        command = [str(arg) for arg in service["command"]]
        for node_name, address in local.items():
            command = [arg.replace(node_name, address) for arg in command]
        service["command"] = command
        started.append(_compose_server(service, "", free_port()))
    with started[0] as first, started[1] as second:
        one, two = redis.Redis(port=first, protocol=2), redis.Redis(port=second, protocol=2)
        for key in ("a", "b", "c"):  # three shards
            assert one.execute_command("AI.TENSORSET", key, "FLOAT", 1, "VALUES", 7) == b"OK"
            assert two.execute_command("AI.TENSORGET", key, "VALUES") == [b"7"]
        assert sum(node.client().dbsize() for node in redis_cluster.primaries()) == 3
