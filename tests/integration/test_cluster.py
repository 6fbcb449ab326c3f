"""A Redis Cluster behind the server: AI commands over keys on three shards, relayed commands routed by their
keys (CROSSSLOT, fan-out, MULTI within one slot, pub/sub), MOVED followed after a slot moved. Every key is
checked on the node that must hold it, through a direct connection to that node."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest
import redis

from server.config import Config
from server.store.cluster_keys import key_slot
from tests.cluster_support import (
    ClusterNode,
    LocalCluster,
    assign_slot,
    keys_on_three_shards,
    owner,
    served_by,
    writes_tensor,
)
from tests.models import torch_add
from tests.scripts import REDIS_SCRIPT, store_script
from tests.support import RunningServer, free_port, running_server, wait_until


@pytest.fixture
def cluster_server(cluster: LocalCluster) -> Iterator[RunningServer]:
    with running_server(Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0)) as running:
        yield running


@pytest.fixture
def client(cluster_server: RunningServer) -> Iterator[redis.Redis]:
    conn = cluster_server.client()
    yield conn
    conn.close()


def test_the_cluster_is_detected_and_every_primary_known(cluster_server: RunningServer,
                                                         client: redis.Redis) -> None:
    store = cluster_server.server.ctx.store
    assert store.kind == "cluster"
    assert "3 primaries" in store.describe()
    # to its clients the server is one standalone endpoint: a cluster client must not route around it
    assert client.info("cluster") == {"cluster_enabled": 0}
    with pytest.raises(redis.ResponseError, match="This instance has cluster support disabled"):
        client.execute_command("CLUSTER", "SLOTS")


def test_modelexecute_with_model_inputs_and_outputs_on_three_shards(cluster: LocalCluster,
                                                                    client: redis.Redis) -> None:
    model, a, b = keys_on_three_shards(cluster, "m")
    out = keys_on_three_shards(cluster, "out")[1]
    assert client.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add()) == b"OK"
    client.execute_command("AI.TENSORSET", a, "FLOAT", 2, "VALUES", 1, 2)
    client.execute_command("AI.TENSORSET", b, "FLOAT", 2, "VALUES", 10, 20)
    assert client.execute_command("AI.MODELEXECUTE", model, "INPUTS", 2, a, b, "OUTPUTS", 1, out) == b"OK"
    assert client.execute_command("AI.TENSORGET", out, "VALUES") == [b"11", b"22"]
    for key in (model, a, b, out):
        assert owner(cluster, key).client().exists(key) == 1  # on the shard that owns it, nowhere else
    info = dict(zip(*[iter(client.execute_command("AI.INFO", model))] * 2, strict=True))
    assert info[b"calls"] == 1 and info[b"samples"] == 2
    assert [row[0] for row in client.execute_command("AI._MODELSCAN")] == [model.encode()]
    assert client.execute_command("AI.MODELDEL", model) == b"OK"
    assert client.execute_command("AI._MODELSCAN") == []


def test_outputs_on_several_shards_are_each_written(cluster: LocalCluster, client: redis.Redis) -> None:
    outs = keys_on_three_shards(cluster, "o")
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 2, "VALUES", 3, 4)
    dag = ["AI.DAGEXECUTE", "LOAD", 1, "x", "PERSIST", 3, *outs, "|>",
           "AI.TENSORSET", outs[0], "FLOAT", 1, "VALUES", 1, "|>",
           "AI.TENSORSET", outs[1], "FLOAT", 1, "VALUES", 2, "|>",
           "AI.TENSORSET", outs[2], "FLOAT", 1, "VALUES", 3]
    assert client.execute_command(*dag) == [b"OK", b"OK", b"OK"]
    for value, key in enumerate(outs, start=1):
        assert owner(cluster, key).client().exists(key) == 1
        assert client.execute_command("AI.TENSORGET", key, "VALUES") == [str(value).encode()]


def test_a_dag_loads_runs_and_persists_over_every_shard(cluster: LocalCluster, client: redis.Redis) -> None:
    """One DAG whose LOAD keys, model, script, script KEYS and PERSIST keys each spread over the three shards:
    every key read where it lives and written where it belongs, with no hash tag."""
    a, b, model = keys_on_three_shards(cluster, "da")
    script, *script_keys = keys_on_three_shards(cluster, "ds")
    outs = keys_on_three_shards(cluster, "dp")
    client.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    store_script(client, script, REDIS_SCRIPT, "set_get")
    client.execute_command("AI.TENSORSET", a, "FLOAT", 2, "VALUES", 1, 2)
    client.execute_command("AI.TENSORSET", b, "FLOAT", 2, "VALUES", 10, 20)
    dag = ["AI.DAGEXECUTE", "LOAD", 2, a, b, "PERSIST", 3, *outs, "|>",
           "AI.MODELEXECUTE", model, "INPUTS", 2, a, b, "OUTPUTS", 1, outs[0], "|>",
           "AI.SCRIPTEXECUTE", script, "set_get", "KEYS", 1, script_keys[0], "ARGS", 1, "7",
           "OUTPUTS", 2, outs[1], "ok", "|>",
           "AI.SCRIPTEXECUTE", script, "set_get", "KEYS", 1, script_keys[1], "ARGS", 1, "8",
           "OUTPUTS", 2, outs[2], "ok2"]
    assert client.execute_command(*dag) == [b"OK", b"OK", b"OK"]
    assert client.execute_command("AI.TENSORGET", outs[0], "VALUES") == [b"11", b"22"]
    assert client.execute_command("AI.TENSORGET", outs[1], "VALUES") == [7]
    assert client.execute_command("AI.TENSORGET", outs[2], "VALUES") == [8]
    for key, value in zip(script_keys, (b"7", b"8"), strict=True):
        assert owner(cluster, key).client().get(key) == value  # redis.execute wrote it on its own shard
    for key in outs:
        assert owner(cluster, key).client().exists(key) == 1
    assert client.exists("ok") == 0 and client.exists("ok2") == 0  # not persisted
    for key in (model, script):
        assert dict(zip(*[iter(client.execute_command("AI.INFO", key))] * 2, strict=True))[b"calls"] >= 1


def test_a_wrongtype_output_on_one_shard_is_reported(cluster: LocalCluster, client: redis.Redis) -> None:
    outs = keys_on_three_shards(cluster, "w")
    client.set(outs[2], "not a tensor")
    dag = ["AI.DAGEXECUTE", "PERSIST", 2, outs[0], outs[2], "|>",
           "AI.TENSORSET", outs[0], "FLOAT", 1, "VALUES", 1, "|>", "AI.TENSORSET", outs[2], "FLOAT", 1, "VALUES", 2]
    *ops, persisted = client.execute_command(*dag)  # as on one store: the ops' replies, then the PERSIST error
    assert ops == [b"OK", b"OK"] and isinstance(persisted, redis.ResponseError) and "WRONGTYPE" in str(persisted)
    assert client.get(outs[2]) == b"not a tensor"
    assert client.exists(outs[0]) == 0  # checked on every shard before anything was written


def test_big_tensors_are_checked_and_written_on_every_shard(cluster: LocalCluster, client: redis.Redis) -> None:
    """A tensor over 64 KiB is written by MULTI, a check script and SET … NX on its key's shard: written,
    replaced, or refused with WRONGTYPE and the key left as it was, whichever shard holds it."""
    blob = np.arange(20_000, dtype=np.float32).tobytes()
    for key in keys_on_three_shards(cluster, "big"):
        assert client.execute_command("AI.TENSORSET", key, "FLOAT", 20_000, "BLOB", blob) == b"OK"
        assert client.execute_command("AI.TENSORSET", key, "FLOAT", 20_000, "BLOB", blob[::-1]) == b"OK"
        assert owner(cluster, key).client().execute_command("GET", key).endswith(blob[::-1])
        client.delete(key)
        client.set(key, "plain")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("AI.TENSORSET", key, "FLOAT", 20_000, "BLOB", blob)
        assert owner(cluster, key).client().get(key) == b"plain"


def test_scripts_reach_keys_on_every_shard(cluster: LocalCluster, client: redis.Redis) -> None:
    store_script(client, "r", REDIS_SCRIPT, "set_get")
    for key in keys_on_three_shards(cluster, "s"):
        run = ["AI.SCRIPTEXECUTE", "r", "set_get", "KEYS", 1, key, "ARGS", 1, "41", "OUTPUTS", 2, "v", "ok"]
        assert client.execute_command(*run) == b"OK"
        assert owner(cluster, key).client().get(key) == b"41"
        assert client.execute_command("AI.TENSORGET", "v", "VALUES") == [41]  # an INT64 tensor


def test_scripts_and_functions_loaded_through_the_server_run_on_every_shard(cluster: LocalCluster,
                                                                            client: redis.Redis) -> None:
    """SCRIPT LOAD / FLUSH and FUNCTION LOAD / DELETE reach every primary, as a cluster client sends them: an
    EVALSHA or FCALL then runs whichever shard its key is on — and redis-py's ``register_script`` (EVALSHA, on
    NOSCRIPT a SCRIPT LOAD and EVALSHA again) works. SCRIPT EXISTS answers 1 only for what every primary holds."""
    keys = keys_on_three_shards(cluster, "e")
    for key in keys:
        client.set(key, key)
    sha = client.script_load("return redis.call('GET', KEYS[1])")
    assert all(node.client().script_exists(sha) == [True] for node in cluster.primaries())
    assert [client.evalsha(sha, 1, key) for key in keys] == [key.encode() for key in keys]
    on_one = cluster.primaries()[0].client().script_load("return 1")
    assert client.script_exists(sha, on_one, "0" * 40) == [True, False, False]
    assert client.script_flush() is True
    assert client.script_exists(sha) == [False]
    strlen = client.register_script("return redis.call('STRLEN', KEYS[1])")
    assert [strlen(keys=[key]) for key in keys] == [len(key) for key in keys]
    library = ("#!lua name=ourlib\n"
               "redis.register_function('getit', function(keys, args) return redis.call('GET', keys[1]) end)")
    assert client.function_load(library) == b"ourlib"
    try:
        assert [client.fcall("getit", 1, key) for key in keys] == [key.encode() for key in keys]
    finally:
        assert client.function_delete("ourlib") is True
    with pytest.raises(redis.ResponseError, match="Function not found"):
        client.fcall("getit", 1, keys[0])


def test_relayed_commands_go_to_their_shard_and_cross_slot_is_refused(cluster: LocalCluster,
                                                                       cluster_server: RunningServer,
                                                                       client: redis.Redis) -> None:
    keys = keys_on_three_shards(cluster, "k")
    for key in keys:
        assert client.set(key, key) is True
        assert owner(cluster, key).client().get(key) == key.encode()
        assert client.get(key) == key.encode()
    raw = cluster_server.raw()
    expected = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    command = f"MSET {keys[0]} 1 {keys[1]} 2\r\n".encode()
    assert raw.call(command, expected) == expected  # the shared relay's answer, byte for byte
    assert raw.call(b"MULTI\r\n", b"+OK\r\n") == b"+OK\r\n"
    assert raw.call(command, expected) == expected  # the client's own session's answer too
    assert raw.call(b"DISCARD\r\n", b"+OK\r\n") == b"+OK\r\n"
    raw.close()
    assert client.mset({"{t}a": 1, "{t}b": 2}) is True
    assert client.mget("{t}a", "{t}b") == [b"1", b"2"]
    assert client.dbsize() == 5
    assert sorted(client.keys("*")) == sorted(k.encode() for k in [*keys, "{t}a", "{t}b"])
    assert sorted(client.scan_iter(count=2)) == sorted(client.keys("*"))
    assert client.randomkey() in client.keys("*")
    keyspace = client.info("keyspace")
    assert keyspace["db0"]["keys"] == 5
    assert client.flushall() is True
    assert all(node.client().dbsize() == 0 for node in cluster.primaries())
    with pytest.raises(redis.ResponseError, match="SELECT is not allowed in cluster mode"):
        client.execute_command("SELECT", 1)


def test_a_transaction_stays_in_one_slot(cluster: LocalCluster, client: redis.Redis) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.set("{u}1", "a").incr("{u}2").get("{u}1")
    assert pipe.execute() == [True, 1, b"a"]
    first, other, _ = keys_on_three_shards(cluster, "t")
    pipe = client.pipeline(transaction=True)
    pipe.set(first, 1).set(other, 2)
    with pytest.raises(redis.ResponseError):
        pipe.execute()
    assert client.exists(first, ) == 0 and client.exists(other) == 0  # EXEC aborted: nothing written
    with client.pipeline(transaction=True) as watched:
        watched.watch(first)
        watched.multi()
        watched.set(first, "w")
        assert watched.execute() == [True]
    assert client.get(first) == b"w"


def test_publish_reaches_subscribers_through_any_node(cluster: LocalCluster, cluster_server: RunningServer) -> None:
    subscriber = cluster_server.client().pubsub()
    subscriber.subscribe("news")
    subscriber.ssubscribe("{shard}news")
    confirmed: list[str] = []  # both subscriptions in force before anything is published

    def subscribed() -> bool:
        message = subscriber.get_message(timeout=0.1)
        if message:
            confirmed.append(message["type"])
        return len(confirmed) >= 2

    assert wait_until(subscribed)
    for node in cluster.primaries():  # PUBLISH on any node reaches a subscriber of any other
        node.client().publish("news", f"from {node.port}")
    owner(cluster, "{shard}news").client().execute_command("SPUBLISH", "{shard}news", "sharded")
    publisher = cluster_server.client()  # and through the server: PUBLISH to a node, SPUBLISH to the shard's
    assert publisher.publish("news", "through us") == 1
    assert publisher.execute_command("SPUBLISH", "{shard}news", "sharded through us") == 1
    publisher.close()
    seen: list[bytes] = []

    def collect() -> bool:
        message = subscriber.get_message(timeout=0.2)
        if message and message["type"] in ("message", "smessage"):
            seen.append(message["data"])
        return len(seen) >= 6

    wait_until(collect)
    assert sorted(seen) == sorted([*(f"from {n.port}".encode() for n in cluster.primaries()), b"sharded",
                                   b"through us", b"sharded through us"])
    subscriber.close()


def test_resp3_confirmations_from_two_nodes_come_before_a_reply_of_ours(cluster_server: RunningServer) -> None:
    """SUBSCRIBE goes to the first primary, SSUBSCRIBE to its shard channel's node: each waits for its own
    node's confirmation push, and CLIENT ID (answered by the server itself) comes after both, as in Redis."""
    raw = cluster_server.raw()
    raw.switch_to_resp3()
    raw.send(b"SUBSCRIBE news\r\nSSUBSCRIBE {shard}news\r\nCLIENT ID\r\n")
    expected = (b">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
                b">3\r\n$10\r\nssubscribe\r\n$11\r\n{shard}news\r\n:1\r\n:")
    assert raw.read_exactly(expected).startswith(expected)
    raw.close()


def test_a_shard_channel_the_node_leaves_when_its_slot_moves_is_left(cluster: LocalCluster,
                                                                     cluster_server: RunningServer) -> None:
    """When a shard channel's slot moves, its node unsubscribes the client itself (a sunsubscribe push). A bare
    SUNSUBSCRIBE (sent to the first primary) then leaves the one channel still held there: one push, and the
    reply behind it comes (it waited for a push for each channel, both, for ever)."""
    topology = cluster_server.server.ctx.store.cluster.topology  # type: ignore[attr-defined]
    home = topology.primaries[0]
    on_home = (f"news{i}" for i in range(10_000) if topology.primary_of(key_slot(f"news{i}".encode())) == home)
    moving, staying = next(on_home), next(on_home)
    raw = cluster_server.raw()
    raw.switch_to_resp3()
    raw.send(b"SSUBSCRIBE %s\r\nSSUBSCRIBE %s\r\n" % (moving.encode(), staying.encode()))
    assert raw.read_until(staying.encode() + b"\r\n:2\r\n").endswith(b":2\r\n")
    with _slot_handed_over(cluster, moving):
        left = b">3\r\n$12\r\nsunsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(moving), moving.encode())
        assert raw.read_until(left).endswith(left)
        raw.send(b"SUNSUBSCRIBE\r\nCLIENT GETNAME\r\n")
        expected = b">3\r\n$12\r\nsunsubscribe\r\n$%d\r\n%s\r\n:0\r\n_\r\n" % (len(staying), staying.encode())
        assert raw.read_exactly(expected, timeout=5) == expected
    raw.close()


def _on_each_primary(cluster_server: RunningServer, prefix: str) -> list[str]:
    """One channel name per primary, each of a slot that primary owns, in the primaries' order."""
    topology = cluster_server.server.ctx.store.cluster.topology  # type: ignore[attr-defined]
    names: list[str] = []
    for primary in topology.primaries:
        names.append(next(f"{prefix}{i}" for i in range(10_000)
                          if topology.primary_of(key_slot(f"{prefix}{i}".encode())) == primary))
    return names


def _sunsubscribed(channel: str, count: int) -> bytes:
    return b">3\r\n$12\r\nsunsubscribe\r\n$%d\r\n%s\r\n:%d\r\n" % (len(channel), channel.encode(), count)


def test_a_bare_sunsubscribe_leaves_the_shard_channels_of_every_node(cluster: LocalCluster,
                                                                       cluster_server: RunningServer) -> None:
    """Shard channels on three nodes: a bare SUNSUBSCRIBE leaves every one, one confirmation each, counting down
    to 0 as one Redis 7 holding them all would (it reached the first primary only, leaving the others
    subscribed); the reply pipelined behind it comes after them; a second one answers a nil channel and 0, and
    SPUBLISH then reaches no one."""
    channels = _on_each_primary(cluster_server, "shard-news")
    raw = cluster_server.raw()
    raw.switch_to_resp3()
    for channel in channels:
        raw.send(b"SSUBSCRIBE %s\r\n" % channel.encode())
        assert raw.read_until(channel.encode() + b"\r\n:1\r\n").endswith(b":1\r\n")
    raw.send(b"SUNSUBSCRIBE\r\nCLIENT GETNAME\r\n")
    expected = b"".join(_sunsubscribed(channel, len(channels) - n) for n, channel in enumerate(channels, start=1))
    assert raw.read_exactly(expected + b"_\r\n", timeout=5) == expected + b"_\r\n"
    raw.send(b"SUNSUBSCRIBE\r\n")
    none_left = b">3\r\n$12\r\nsunsubscribe\r\n_\r\n:0\r\n"
    assert raw.read_exactly(none_left, timeout=5) == none_left
    for channel in channels:
        assert owner(cluster, channel).client().execute_command("SPUBLISH", channel, "anyone?") == 0
    raw.close()


def test_a_moved_slot_is_followed(cluster: LocalCluster, client: redis.Redis) -> None:
    """An empty slot handed to another primary behind the server's back: the stale map gets MOVED, which the
    server follows (for AI and relayed commands), and the key lands on the new owner."""
    key = "moving"
    with _slot_handed_over(cluster, key) as (_source, target):
        assert client.set(key, "v") is True
        assert target.client().get(key) == b"v"
        client.execute_command("AI.TENSORSET", key + "{x}", "FLOAT", 1, "VALUES", 1)  # another slot: still routed
        client.delete(key)
        client.execute_command("AI.TENSORSET", key, "FLOAT", 2, "VALUES", 5, 6)
        assert target.client().exists(key) == 1
        assert client.execute_command("AI.TENSORGET", key, "VALUES") == [b"5", b"6"]
        client.delete(key)


def test_a_big_tensor_written_to_a_moved_slot_follows_it(cluster: LocalCluster, client: redis.Redis) -> None:
    """A big tensor goes straight to its key's node, header and data apart; the slot handed to another primary
    behind the server's back, that node answers MOVED and the write goes the general way, which follows it."""
    key = "bigmoving"
    blob = np.arange(20_000, dtype=np.float32).tobytes()
    with _slot_handed_over(cluster, key) as (_source, target):
        assert client.execute_command("AI.TENSORSET", key, "FLOAT", 20_000, "BLOB", blob) == b"OK"
        assert target.client().execute_command("GET", key).endswith(blob)
        assert client.execute_command("AI.TENSORGET", key, "BLOB") == blob
        client.delete(key)


def test_a_slot_half_migrated_is_followed_by_ask(cluster: LocalCluster, client: redis.Redis) -> None:
    """A slot half-way through a migration (MIGRATING on its owner, IMPORTING on the other node, one key moved
    over): for the moved key and a new one the owner answers ASK, which the server follows with ASKING — for
    relayed and AI commands alike — while the key still on the owner is read there."""
    stay, moved, new, big = "{mig}stay", "{mig}moved", "{mig}new", "{mig}big"
    blob = np.arange(20_000, dtype=np.float32).tobytes()  # over 64 KiB: its header and data sent apart
    slot = key_slot(stay.encode())
    source = owner(cluster, stay)
    target = next(node for node in cluster.primaries() if node.port != source.port)
    client.set(stay, "s")
    client.execute_command("AI.TENSORSET", moved, "FLOAT", 2, "VALUES", 1, 2)
    target.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING",
                                    source.client().execute_command("CLUSTER", "MYID"))
    source.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING",
                                    target.client().execute_command("CLUSTER", "MYID"))
    try:
        source.client().execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", moved)
        left_on_source = partial(source.client().execute_command, "CLUSTER", "COUNTKEYSINSLOT", slot)
        assert left_on_source() == 1  # (EXISTS there would answer ASK: the key is gone)
        assert client.get(stay) == b"s"
        assert client.execute_command("AI.TENSORGET", moved, "VALUES") == [b"1", b"2"]
        assert client.strlen(moved) > 0  # a relayed command, through the shared relay
        assert client.execute_command("AI.TENSORSET", new, "FLOAT", 1, "VALUES", 3) == b"OK"
        assert left_on_source() == 1
        on_target = target.client()
        on_target.execute_command("ASKING")
        assert on_target.exists(new) == 1  # written where the slot is going
        assert client.execute_command("AI.TENSORGET", new, "VALUES") == [b"3"]
        assert client.execute_command("AI.TENSORSET", big, "FLOAT", 20_000, "BLOB", blob) == b"OK"
        on_target.execute_command("ASKING")
        assert on_target.exists(big) == 1 and left_on_source() == 1
        assert client.execute_command("AI.TENSORGET", big, "BLOB") == blob
    finally:
        if source.client().exists(stay):
            source.client().execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", stay)
        assign_slot(cluster, slot, target)  # the migration ends, then the emptied slot goes back
        assert wait_until(lambda: served_by(cluster, stay, target))
        for key in (stay, moved, new, big):
            target.client().delete(key)
        assign_slot(cluster, slot, source)
        assert wait_until(lambda: served_by(cluster, stay, source))


@contextmanager
def _slot_handed_over(cluster: LocalCluster, key: str) -> Iterator[tuple[ClusterNode, ClusterNode]]:
    """The (empty) slot of ``key`` handed to another primary behind the server's back, then given back."""
    slot = key_slot(key.encode())
    source = owner(cluster, key)
    target = next(node for node in cluster.primaries() if node.port != source.port)
    assign_slot(cluster, slot, target)
    try:
        assert wait_until(lambda: served_by(cluster, key, target))
        yield source, target
    finally:
        assign_slot(cluster, slot, source)
        assert wait_until(lambda: served_by(cluster, key, source))




def test_tensors_survive_a_round_trip_through_numpy(cluster: LocalCluster, client: redis.Redis) -> None:
    for key in keys_on_three_shards(cluster, "np"):
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        client.execute_command("AI.TENSORSET", key, "FLOAT", 2, 3, "BLOB", data.tobytes())
        blob = client.execute_command("AI.TENSORGET", key, "BLOB")
        assert np.frombuffer(blob, dtype=np.float32).tolist() == data.ravel().tolist()


def test_seed_nodes_are_asked_when_the_url_node_is_down(cluster: LocalCluster) -> None:
    seeds = ",".join(f"127.0.0.1:{node.port}" for node in cluster.primaries())
    dead = "redis://127.0.0.1:1"  # nothing listens there
    with running_server(Config(port=0, redis_url=dead, cluster_seeds=seeds, shutdown_timeout=2.0)) as server:
        conn = server.client()
        assert conn.execute_command("AI.TENSORSET", "a", "FLOAT", 1, "VALUES", 1) == b"OK"
        assert owner(cluster, "a").client().exists("a") == 1
        conn.close()


def test_a_url_naming_another_database_is_refused_at_start(cluster: LocalCluster) -> None:
    """A cluster has database 0 only: the server says so and exits, rather than serve db 0 as if asked."""
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--redis-url",
                          f"{cluster.seed_url}/2"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "a Redis Cluster has only database 0 (--redis-url names database 2)" in out.stderr


def test_an_unserved_slot_gets_an_error_naming_it(cluster: LocalCluster, client: redis.Redis) -> None:
    key = "orphan"
    slot = key_slot(key.encode())
    node = owner(cluster, key)
    node.client().execute_command("CLUSTER", "DELSLOTS", slot)
    try:
        errors = []
        for _ in range(3):  # the first may go by the old map (the node answers); then ours names the slot
            with pytest.raises(redis.ResponseError) as caught:
                client.execute_command("AI.TENSORSET", key, "FLOAT", 1, "VALUES", 1)
            errors.append(str(caught.value))
            time.sleep(0.1)
        assert all("Hash slot not served" in e or "The cluster is down" in e for e in errors), errors
        assert all(f"slot {slot}" in e for e in errors), errors  # the node's bare CLUSTERDOWN completed
        # that node's other slots: the node is in cluster_state:fail, and a relayed command says which node
        neighbour = next(f"n{i}" for i in range(1000) if owner(cluster, f"n{i}").port == node.port
                         and key_slot(f"n{i}".encode()) != slot)
        with pytest.raises(redis.ResponseError) as caught:
            client.set(neighbour, 1)
        assert str(caught.value) == (f"The cluster is down (slot {key_slot(neighbour.encode())}, "
                                     f"asked 127.0.0.1:{node.port})")
        assert client.ping() is True  # the server and this client carry on
    finally:
        node.client().execute_command("CLUSTER", "ADDSLOTS", slot)
        cluster.wait_healthy()
    assert wait_until(lambda: writes_tensor(client, key, 1))


def test_blocking_commands_wait_on_their_keys_node(cluster: LocalCluster, cluster_server: RunningServer) -> None:
    waiting, pusher = cluster_server.client(), cluster_server.client()
    for key in keys_on_three_shards(cluster, "q"):
        result: list[object] = []
        thread = threading.Thread(target=_pop_into, args=(waiting, key, result))
        thread.start()
        assert wait_until(partial(_blocked_on, owner(cluster, key)))
        pusher.rpush(key, "job")
        thread.join(15)
        assert result == [(key.encode(), b"job")]


def test_shutdown_answers_a_timed_block_before_closing_one_blocked_for_ever_on_another_node(
        cluster: LocalCluster) -> None:
    """Graceful shutdown waits for a blocking command with a timeout and closes a client blocked for ever at
    once, judged by the client's oldest reply: a BLPOP with a timeout on one node, pipelined before a BLPOP
    with none on another, is answered (nil, when it times out) before the client is closed. The other node's
    block for ever closed it at once, unanswered."""
    timed, for_ever, _third = keys_on_three_shards(cluster, "shut")
    with running_server(Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=60.0)) as running:
        raw = running.raw()
        raw.send(f"BLPOP {timed} 5\r\nBLPOP {for_ever} 0\r\n".encode())
        assert wait_until(lambda: _blocked_on(owner(cluster, timed)) and _blocked_on(owner(cluster, for_ever)))
        running.loop.call_soon_threadsafe(running.server.stop)
        assert raw.read_until(b"\r\n", timeout=60) == b"*-1\r\n"
        raw.sock.settimeout(30)
        assert raw.sock.recv(100) == b""


def _blocked_on(node: ClusterNode) -> bool:
    return any(entry.get("cmd") == "blpop" for entry in node.client().client_list())


def _pop_into(conn: redis.Redis, key: str, out: list[object]) -> None:
    out.append(conn.blpop([key], timeout=10))


def test_transactions_keep_every_queued_command_inside(cluster: LocalCluster, cluster_server: RunningServer) -> None:
    """Keyless commands (PUBLISH, SCAN) queued before the first key, a refused command after WATCH, a nested
    MULTI: each stays in the transaction, and the connection is usable afterwards."""
    first, other, _ = keys_on_three_shards(cluster, "x")
    raw = cluster_server.raw()
    expected = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n"
    got = raw.call(f"MULTI\r\nPUBLISH ch x\r\nSCAN 0\r\nSET {first} 1\r\nEXEC\r\n".encode(), expected)
    assert got.startswith(expected)
    raw.read_until(b"+OK\r\n")  # the SET's element closes EXEC's reply
    assert raw.call(f"GET {first}\r\n".encode(), b"$1\r\n1\r\n") == b"$1\r\n1\r\n"  # not queued any more
    crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    raw.send(f"WATCH {first}\r\nMULTI\r\nSET {other} 2\r\nEXEC\r\n".encode())
    answer = raw.read_until(b"previous errors.\r\n")
    assert answer == b"+OK\r\n+OK\r\n" + crossslot + b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    nested = b"+OK\r\n-ERR MULTI calls can not be nested\r\n+OK\r\n"
    assert raw.call(b"MULTI\r\nMULTI\r\nDISCARD\r\n", nested) == nested
    assert raw.call(b"SCAN 5\r\n", b"-ERR invalid cursor\r\n") == b"-ERR invalid cursor\r\n"
    raw.close()
    assert owner(cluster, other).client().exists(other) == 0


def test_a_queued_command_that_gets_moved_fails_the_transaction(cluster: LocalCluster,
                                                                 cluster_server: RunningServer) -> None:
    key = "txmoving"
    with _slot_handed_over(cluster, key) as (source, target):
        raw = cluster_server.raw()
        reply = raw.call(f"MULTI\r\nSET {key} written\r\nEXEC\r\n".encode(), b"+OK\r\n+QUEUED\r\n-EXECABORT")
        assert b"EXECABORT" in reply or b"MOVED" in reply, reply
        raw.close()
        assert target.client().get(key) is None and source.client().execute_command("DBSIZE") == 0


def test_a_lost_node_connection_closes_the_clients_other_ones(cluster: LocalCluster,
                                                              cluster_server: RunningServer) -> None:
    first, other, _ = keys_on_three_shards(cluster, "lost")
    raw = cluster_server.raw()
    watches = f"WATCH {first}\r\nUNWATCH\r\nWATCH {other}\r\n".encode()  # a connection to two nodes
    assert raw.call(watches, b"+OK\r\n" * 3) == b"+OK\r\n" * 3
    node_a, node_b = owner(cluster, first), owner(cluster, other)
    ours_on_a = [c["id"] for c in node_a.client().client_list() if c.get("cmd") == "unwatch"]
    assert len(ours_on_a) == 1 and any(c.get("cmd") == "watch" for c in node_b.client().client_list())
    node_a.client().execute_command("CLIENT", "KILL", "ID", ours_on_a[0])
    assert raw.closed_by_peer()  # closed by the server, as a failover closes a cluster client's connection
    assert wait_until(lambda: not any(c.get("cmd") == "watch" for c in node_b.client().client_list()))
    raw.close()
