"""A cluster whose nodes want a login, or speak TLS only (issue: "Login, TLS and the db rule work as for one
node"): the URL's user, password and TLS are used on every node the server finds — data links, relayed
sessions and the metadata cache's tracking connections alike. An ACL user that may not run CLUSTER SHARDS
makes the server read the slot map with CLUSTER SLOTS, the way it reads a Redis older than 7 (which has no
CLUSTER SHARDS): a real node's refusal drives that path here. A wrong password stops the server at start, in
our words; so does a node certificate the server does not trust."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from server.config import Config
from tests.cluster_support import LocalCluster, keys_on_three_shards, local_cluster, make_tls_files, owner
from tests.models import torch_add
from tests.support import ci_tool, free_port, running_server

PASSWORD = "s3cret"
ACL_USER = ("--user", "ai", "on", ">aipass", "~*", "&*", "+@all", "-cluster|shards")
ONE_TWO = b"\x00\x00\x80?\x00\x00\x00@"  # float32 [1, 2]


@pytest.fixture(scope="module")
def locked() -> Iterator[LocalCluster]:
    with local_cluster(primaries=3, replicas=0, password=PASSWORD, node_options=ACL_USER) as cluster:
        yield cluster


def _seed(cluster: LocalCluster, login: str) -> str:
    return f"redis://{login}@127.0.0.1:{cluster.nodes[0].port}"


def _refused_at_start(url: str, **env: str) -> str:
    """What the server says on stderr when it cannot start in front of ``url`` (it must exit 1)."""
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--redis-url", url],
                         capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert out.returncode == 1
    assert "redisai-server:" in out.stderr, out.stderr
    return out.stderr


def _run_over_three_shards(conn: redis.Redis, cluster: LocalCluster, prefix: str) -> None:
    """The model, its input and its output on three shards; the run twice (the second from the cache)."""
    model, x, y = keys_on_three_shards(cluster, prefix)
    assert len({owner(cluster, key).port for key in (model, x, y)}) == 3
    assert conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add()) == b"OK"
    conn.execute_command("AI.TENSORSET", x, "FLOAT", 2, "BLOB", ONE_TWO)
    for _ in range(2):
        assert conn.execute_command("AI.MODELEXECUTE", model, "INPUTS", 2, x, x, "OUTPUTS", 1, y) == b"OK"
    assert [float(v) for v in conn.execute_command("AI.TENSORGET", y, "VALUES")] == [2.0, 4.0]


def test_the_default_users_password_reaches_every_node(locked: LocalCluster) -> None:
    locked.flush()
    with running_server(Config(port=0, redis_url=_seed(locked, f":{PASSWORD}"))) as server:
        conn = server.client()
        _run_over_three_shards(conn, locked, "pw")
        assert int(conn.info("ai")["ai_cache_hits"]) >= 1  # the tracking connections logged in too
        keys = keys_on_three_shards(locked, "relayed")
        for key in keys:
            assert conn.set(key, "v") is True
        assert [conn.get(key) for key in keys] == [b"v"] * 3
        assert conn.dbsize() == sum(node.client().dbsize() for node in locked.primaries())


def test_an_acl_user_without_cluster_shards_reads_the_map_with_cluster_slots(locked: LocalCluster) -> None:
    locked.flush()
    for node in locked.primaries():
        node.client().config_resetstat()
    with running_server(Config(port=0, redis_url=_seed(locked, "ai:aipass"))) as server:
        _run_over_three_shards(server.client(), locked, "acl")
    stats = [node.client().info("commandstats") for node in locked.primaries()]
    assert sum(s.get("cmdstat_cluster|shards", {}).get("rejected_calls", 0) for s in stats) >= 1
    assert sum(s.get("cmdstat_cluster|slots", {}).get("calls", 0) for s in stats) >= 1
    assert all(s.get("cmdstat_cluster|shards", {}).get("calls", 0) == 0 for s in stats)


def test_a_wrong_password_stops_the_server_at_start_in_our_words(locked: LocalCluster) -> None:
    said = _refused_at_start(_seed(locked, ":wrong"))
    assert "AUTH failed: WRONGPASS invalid username-password pair" in said, said  # no repr
    assert ":wrong@" not in said  # the URL, if named, with its password left out


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three redis-server primaries speaking TLS only, to clients and on the cluster bus, with a password.
    Debian's redis-server (the embedded store's valkey is built without TLS) and openssl: CI provides both;
    elsewhere, without them, these tests are skipped."""
    ci_tool("redis-server")
    ci_tool("openssl")
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    with local_cluster(primaries=3, replicas=0, password=PASSWORD, tls=files) as cluster:
        yield cluster


def test_a_tls_only_cluster_is_reached_over_tls_on_every_node(tls_cluster: LocalCluster,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``rediss://`` on the seed: every node the map names is reached over TLS, its certificate checked
    against the CA the server trusts (here through OpenSSL's ``SSL_CERT_FILE``, as docs/deployment.md says)."""
    monkeypatch.setenv("SSL_CERT_FILE", tls_cluster.nodes[0].tls_ca)
    assert tls_cluster.seed_url.startswith("rediss://")
    with running_server(Config(port=0, redis_url=tls_cluster.seed_url)) as server:
        conn = server.client()
        _run_over_three_shards(conn, tls_cluster, "tls")
        assert int(conn.info("ai")["ai_cache_hits"]) >= 1
        assert conn.dbsize() == sum(node.client().dbsize() for node in tls_cluster.primaries())


def test_a_node_certificate_the_server_does_not_trust_stops_it_at_start(tls_cluster: LocalCluster,
                                                                        tmp_path: Path) -> None:
    """Another CA in SSL_CERT_FILE: the handshake fails and the server says so, instead of talking in clear."""
    other = make_tls_files(tmp_path)
    said = _refused_at_start(tls_cluster.seed_url, SSL_CERT_FILE=str(other.ca))
    assert "CERTIFICATE_VERIFY_FAILED" in said, said
