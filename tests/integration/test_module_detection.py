"""Tools find RedisAI as a module named ``ai`` (MODULE LIST, INFO modules), and INFO has Redis's sections."""

from __future__ import annotations

import pytest
import redis

from server.config import Config
from tests.support import RunningServer, running_server


def test_module_list_shows_the_ai_module(server: RunningServer) -> None:
    for protocol in (2, 3):
        modules = server.client(protocol=protocol).execute_command("MODULE", "LIST")
        entries = [dict(zip(m[::2], m[1::2], strict=True)) if isinstance(m, list) else m for m in modules]
        ai = [m for m in entries if m[b"name"] == b"ai"]
        assert len(ai) == 1 and ai[0][b"ver"] == 10207, modules


def test_info_modules_lists_ai_then_its_sections(server: RunningServer) -> None:
    conn = server.client()
    info = conn.info("modules")
    assert info["modules"][0]["name"] == "ai" and info["modules"][0]["ver"] == 10207  # redis-py lists module lines
    assert info["ai_RedisAI_version"] == "1.2.7" and info["ai_rdb_version"] == 4 and info["ai_git_sha"]
    assert conn.info()["modules"][0]["name"] == "ai"  # the default INFO lists modules too


def test_info_everything_has_the_sections_a_redis_has(server: RunningServer) -> None:
    conn = server.client()
    conn.set("k", "v")
    everything = conn.info("everything")
    for field in ("used_memory", "rdb_last_save_time", "instantaneous_ops_per_sec", "role", "used_cpu_sys",
                  "cluster_enabled", "redis_version", "process_id", "ai_runs", "ai_git_sha"):
        assert field in everything, field
    ours = conn.info("server")
    assert ours["process_id"] == server.server.ctx.pid and ours["tcp_port"] == server.port  # ours, not the store's
    assert everything["db0"]["keys"] >= 1
    assert conn.info("stats")["total_connections_received"] >= 1


def test_module_administration_is_refused_on_the_embedded_store() -> None:
    with running_server(Config(port=0, shutdown_timeout=2.0)) as server:
        _refused(server)


def _refused(server: RunningServer) -> None:
    with pytest.raises(redis.ResponseError, match="not allowed: the embedded store belongs to this server"):
        server.client().execute_command("MODULE", "LOAD", "/tmp/x.so")
    conn = server.client()
    conn.execute_command("MULTI")
    with pytest.raises(redis.ResponseError, match="cannot be queued in MULTI"):
        conn.execute_command("MODULE", "LOAD", "/tmp/x.so")
    with pytest.raises(redis.ResponseError, match="previous errors"):  # EXECABORT
        conn.execute_command("EXEC")
