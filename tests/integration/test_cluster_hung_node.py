"""A primary that stops answering (SIGSTOP, and no replica to take over): commands already sent to it answer,
within the per-command timeout, an error naming the node, later ones do not queue behind them, and the other
shards' keys keep working meanwhile. Once the node answers again, so do its slots. This test has its own
cluster, since it stops a node."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from server.config import Config
from server.store.cluster import ClusterStore
from server.store.cluster_keys import key_slot
from tests.cluster_support import LocalCluster, local_cluster, writes_tensor
from tests.models import torch_add
from tests.support import RawClient, RunningServer, loop_held, running_server, wait_until

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


ONE_TWO = b"\x00\x00\x80?\x00\x00\x00@"  # float32 [1, 2]
RUNS_APART, RUNS_HELD = 6, 2  # runs arriving together: checks on live shards only; a check on the hung one


def _model_run(model: str, tag: str, n: int) -> bytes:
    parts = [part.encode() for part in ("AI.MODELEXECUTE", model, "INPUTS", "2", f"{{{tag}}}a", f"{{{tag}}}a",
                                        "OUTPUTS", "1", f"{{{tag}}}out{n}")]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


def test_runs_joined_with_one_checking_on_a_hung_node_are_answered_without_it(small_cluster: LocalCluster) -> None:
    """Runs arriving together join one send of their writes and checks (server/store/shared_checks.py). One
    whose model is on a node that hangs waits for that node; the others, whose writes and checks are all on
    live nodes, are answered meanwhile — not held until the watchdog gives the hung node up (a minute here)."""
    cluster = small_cluster
    live, victim, third = cluster.primaries()
    tag = _key_on(cluster, live.port, "t")
    held_model, live_model = _key_on(cluster, victim.port, "hm"), _key_on(cluster, third.port, "lm")
    config = Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0, cluster_node_timeout_ms=60_000,
                    inline_op_us=10**6)  # every run on the loop thread: runs read together run together
    with running_server(config) as server:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", f"{{{tag}}}a", "FLOAT", 2, "BLOB", ONE_TWO)
        for model in (held_model, live_model):
            conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
            for _ in range(2):  # its metadata cached, its cost measured on the loop thread
                assert conn.execute_command("AI.MODELEXECUTE", model, "INPUTS", 2, f"{{{tag}}}a", f"{{{tag}}}a",
                                            "OUTPUTS", 1, f"{{{tag}}}warm") == b"OK"
        clients = [server.raw() for _ in range(RUNS_APART + RUNS_HELD)]
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            with loop_held(server):
                for n, client in enumerate(clients):
                    client.send(_model_run(held_model if n < RUNS_HELD else live_model, tag, n))
            for client in clients[RUNS_HELD:]:
                assert client.read_exactly(b"+OK\r\n", timeout=CLIENT_WAIT_S) == b"+OK\r\n"
            assert all(client.read_until(b"\r\n", timeout=0.5) == b"" for client in clients[:RUNS_HELD])
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        for client in clients[:RUNS_HELD]:  # once the node answers again, so are they
            assert client.read_exactly(b"+OK\r\n", timeout=CLIENT_WAIT_S) == b"+OK\r\n"
        assert [float(v) for v in conn.execute_command("AI.TENSORGET", f"{{{tag}}}out0", "VALUES")] == [2.0, 4.0]
        for client in clients:
            client.close()


def test_a_map_read_timing_out_on_a_busy_node_leaves_its_commands_be() -> None:
    """A primary busy for longer than the map query waits (DEBUG SLEEP 3, under the 10 s node timeout): a map
    refresh meanwhile gives that node up for the map (it asks the next), on its own connection — the command
    our client has in flight there is answered once the node is, not failed with its link closed."""
    with local_cluster(primaries=3, replicas=0, full_coverage=False,
                       node_options=("--enable-debug-command", "yes")) as cluster:
        config = Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0, cluster_node_timeout_ms=10_000)
        with running_server(config) as server:
            store = server.server.ctx.store
            assert isinstance(store, ClusterStore)
            state = store.cluster
            asked_first = state.topology.primaries[0]
            busy = next(node for node in cluster.primaries() if node.port == asked_first.port)
            key = _key_on(cluster, busy.port, "busy")
            client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=CLIENT_WAIT_S)
            assert writes_tensor(client, key, 7)
            sleeper = socket.create_connection(("127.0.0.1", busy.port), timeout=CLIENT_WAIT_S)
            sleeper.sendall(b"DEBUG SLEEP 3\r\n")
            try:
                time.sleep(0.3)  # (were the node not asleep yet, the read below would only pass sooner)
                server.loop.call_soon_threadsafe(state.request_refresh)  # what the 5 s timer or a MOVED does
                assert client.execute_command("AI.TENSORGET", key, "VALUES") == [7]
                assert sleeper.recv(16) == b"+OK\r\n"
            finally:
                sleeper.close()
            client.close()


def _resp(*args: str) -> bytes:
    parts = [arg.encode() for arg in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


@contextmanager
def _watched_server(cluster: LocalCluster) -> Iterator[RunningServer]:
    """Our server in front of ``cluster`` with the short node timeout."""
    config = Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0, cluster_node_timeout_ms=NODE_TIMEOUT_MS)
    with running_server(config) as server:
        yield server


def _with_own_session(server: RunningServer, key: str) -> RawClient:
    """A client whose store session is open (WATCH opens it, kept for its life), with a connection to ``key``'s
    node."""
    client = server.raw()
    client.send(_resp("WATCH", key) + _resp("UNWATCH"))
    assert client.read_exactly(b"+OK\r\n+OK\r\n") == b"+OK\r\n+OK\r\n"
    return client


def test_a_clients_own_connection_to_a_hung_node_is_bounded_too(small_cluster: LocalCluster) -> None:
    """A client with a store session of its own (opened here by WATCH; redis-py 8.1 opens one at connect)
    sends its relayed commands over its own connections to the nodes. A command a hung node leaves
    unanswered gets the error naming the node within the node timeout, as on the shared connections (the client
    is then closed, as when its connection to a node is lost) — while another client's blocking command, waiting
    on a live node longer than that, is left to wait."""
    cluster = small_cluster
    victim, live = cluster.primaries()[1], cluster.primaries()[0]
    hung_key, live_list = _key_on(cluster, victim.port, "own"), _key_on(cluster, live.port, "list")
    with _watched_server(cluster) as server:
        waiter, client = server.raw(), _with_own_session(server, hung_key)
        waiter.send(_resp("BLPOP", live_list, "0"))
        client.send(_resp("SET", hung_key, "v"))
        assert client.read_exactly(b"+OK\r\n") == b"+OK\r\n"  # its connection to the node is open
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            client.send(_resp("GET", hung_key))
            answer = client.read_until(b"\r\n", timeout=CLIENT_WAIT_S)
            assert b"no answer within" in answer and f"127.0.0.1:{victim.port}".encode() in answer, answer
            live.client().rpush(live_list, "pushed")  # the BLPOP waited through the timeout, and is answered
            assert waiter.read_until(b"pushed\r\n", timeout=CLIENT_WAIT_S).endswith(b"pushed\r\n")
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        after = _key_on(cluster, victim.port, "back")  # once the node answers again, so do its slots
        assert wait_until(lambda: writes_tensor(server.client(), after, 4), timeout=CLIENT_WAIT_S)
        for conn in (waiter, client):
            conn.close()


def test_a_client_whose_connection_to_a_hung_node_is_given_up_gets_every_answer_then_is_closed(
        small_cluster: LocalCluster) -> None:
    """A client's own connections go together: when the watchdog gives up on its connection to a hung node, the
    client is closed — and first, the command it has waiting on another node (here a BLPOP on a live one)
    answers an error too, in its place, rather than being left for ever with the client never closed."""
    cluster = small_cluster
    victim, live = cluster.primaries()[1], cluster.primaries()[0]
    hung_key, live_list = _key_on(cluster, victim.port, "gone"), _key_on(cluster, live.port, "wait")
    with _watched_server(cluster) as server:
        client = _with_own_session(server, hung_key)
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            client.send(_resp("BLPOP", live_list, "0") + _resp("GET", hung_key))
            answers = client.read_until(b"connection was reset\r\n", timeout=CLIENT_WAIT_S)
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        blpop, get, rest = answers.split(b"\r\n")
        assert blpop == f"-ERR backing store unavailable: connection to redis://127.0.0.1:{live.port} closed".encode()
        assert get.startswith(f"-ERR backing store unavailable: redis://127.0.0.1:{victim.port}: no answer".encode())
        assert rest == b"" and client.sock.recv(1) == b""  # then closed
        client.close()


@pytest.mark.parametrize("stopped_first", [False, True], ids=["blocked-then-hung", "sent-to-a-hung-node"])
def test_a_blocking_command_on_a_node_that_hangs_is_given_up_on_with_the_node(small_cluster: LocalCluster,
                                                                              stopped_first: bool) -> None:
    """A BLPOP with no timeout may rightly wait for ever, so its own wait says nothing; while it waits, its
    node is sent a PING, and a node that leaves that unanswered for the node timeout is given up on: the
    BLPOP answers the error naming it (and the client is closed, as when its connection to a node is lost)
    instead of hanging. Whether the node hung while the BLPOP waited, or before it was sent."""
    cluster = small_cluster
    victim = cluster.primaries()[1]
    blocked_list = _key_on(cluster, victim.port, "blocked")
    with _watched_server(cluster) as server:
        client = server.raw()
        if stopped_first:
            victim.proc.send_signal(signal.SIGSTOP)
        try:
            client.send(_resp("BLPOP", blocked_list, "0"))
            if not stopped_first:
                assert wait_until(lambda: any(c["cmd"] == "blpop" for c in victim.client().client_list()))
                # a live node's probes are answered: the BLPOP waits on through several node timeouts
                assert client.read_until(b"\r\n", timeout=4 * NODE_TIMEOUT_MS / 1000) == b""
                victim.proc.send_signal(signal.SIGSTOP)
            answer = client.read_until(b"connection was reset\r\n", timeout=CLIENT_WAIT_S)
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        assert answer.startswith(
            f"-ERR backing store unavailable: redis://127.0.0.1:{victim.port}: no answer within".encode()), answer
        assert client.sock.recv(1) == b""  # then closed
        client.close()
        assert wait_until(lambda: writes_tensor(server.client(), blocked_list + "t", 1), timeout=CLIENT_WAIT_S)
