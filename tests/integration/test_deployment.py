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
