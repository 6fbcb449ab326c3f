"""A primary that stops answering (SIGSTOP, and no replica to take over): commands already sent to it answer,
within the per-command timeout, an error naming the node, later ones do not queue behind them, and the other
shards' keys keep working meanwhile. Once the node answers again, so do its slots. This test has its own
cluster, since it stops a node."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest
import redis

from server.config import Config
from server.store.cluster_keys import key_slot
from tests.cluster_support import LocalCluster, local_cluster, writes_tensor
from tests.support import running_server, wait_until

NODE_TIMEOUT_MS = 300
CLIENT_WAIT_S = 30  # every client read is bounded: a hang fails the test instead of stalling it


@pytest.fixture(scope="module")
def small_cluster() -> Iterator[LocalCluster]:
    with local_cluster(primaries=3, replicas=0, full_coverage=False) as cluster:
        yield cluster


def _key_on(cluster: LocalCluster, port: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(10000) if cluster.node_of_slot(key_slot(f"{prefix}{i}".encode())).port
                == port)


def test_a_hung_node_answers_an_error_naming_it_and_the_other_shards_go_on(small_cluster: LocalCluster) -> None:
    cluster = small_cluster
    victim, other = cluster.primaries()[1], cluster.primaries()[0]
    hung_key, live_key = _key_on(cluster, victim.port, "hung"), _key_on(cluster, other.port, "live")
    hung_model = _key_on(cluster, victim.port, "model")  # never stored: its metadata read misses the cache
    config = Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0,
                    cluster_node_timeout_ms=NODE_TIMEOUT_MS)
    with running_server(config) as server:
        client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=CLIENT_WAIT_S)
        relayed = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=CLIENT_WAIT_S)
        assert writes_tensor(client, hung_key, 1) and writes_tensor(client, live_key, 1)
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            node = f"127.0.0.1:{victim.port}"
            errors: list[str] = []

            def ask_hung_node() -> None:
                try:
                    client.execute_command("AI.TENSORGET", hung_key, "VALUES")
                except redis.ResponseError as exc:
                    errors.append(str(exc))

            waiting = threading.Thread(target=ask_hung_node)
            waiting.start()
            # meanwhile, another client's commands for other shards are answered
            other_client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=CLIENT_WAIT_S)
            assert writes_tensor(other_client, live_key, 2)
            assert other_client.execute_command("AI.TENSORGET", live_key, "VALUES") == [2]
            waiting.join(CLIENT_WAIT_S)
            assert not waiting.is_alive(), "a command to the hung node never answered"
            assert len(errors) == 1 and "backing store unavailable" in errors[0] and node in errors[0], errors
            assert "no answer within" in errors[0]
            # a later command does not queue behind the first: it gets its own bounded error — the node's,
            # or the slot's once the map read again shows the cluster gave the node up
            named = f"({node}|slot {key_slot(hung_key.encode())})"
            with pytest.raises(redis.ResponseError, match=named):
                client.execute_command("AI.TENSORSET", hung_key, "INT64", 1, "VALUES", 3)
            # a model whose metadata is not cached: the cache's tracking read to the node is bounded too
            with pytest.raises(redis.ResponseError, match=named):
                client.execute_command("AI.MODELEXECUTE", hung_model, "INPUTS", 1, live_key, "OUTPUTS", 1, live_key)
            # relayed (non-AI) commands of a session-less client: the same bound
            with pytest.raises(redis.ResponseError, match=named):
                relayed.get(hung_key)
            assert relayed.get(live_key) is not None
            assert other_client.execute_command("AI.TENSORGET", live_key, "VALUES") == [2]
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        assert wait_until(lambda: writes_tensor(client, hung_key, 4), timeout=CLIENT_WAIT_S)
        assert client.execute_command("AI.TENSORGET", hung_key, "VALUES") == [4]
        for conn in (client, relayed, other_client):
            conn.close()
