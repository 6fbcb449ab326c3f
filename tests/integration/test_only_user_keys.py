"""The keyspace holds only the user's keys, as RedisAI's does: after a workload of every kind (tensors, TORCH and
ONNX models, scripts, DAGs, stored graphs, runs that fail, RESETSTAT, deletes, a RENAME), KEYS, SCAN, DBSIZE
and RANDOMKEY find exactly the keys the client wrote. AI.INFO's counters are fields of each object's own hash
(server/store/atomic.py), so nothing of ours is left beside it; an older release's separate counters hashes
are moved into their objects when a server starts.

Every run writes its model's hash (the counters), which invalidates the cached metadata of every server tracking
it: the cache keeps that entry, unconfirmed, for runs, whose write checks the model's digest
(server/store/cache.py). So runs cost no metadata read, and a model stored again through another server is
never run stale."""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster

from server.config import Config
from server.store.embedded import EmbeddedStore
from tests import models
from tests.scripts import SCRIPT
from tests.support import RunningServer, running_server

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)

USER_KEYS = {b"a", b"b", b"c", b"err-out", b"mt", b"mo", b"xo", b"yo", b"{s}two", b"sc", b"g", b"gx", b"gy",
             b"{d}in", b"{d}out"}


def _run(conn: redis.Redis, *args: Any) -> Any:
    return conn.execute_command(*args)


def _fails(conn: redis.Redis, *args: Any) -> None:
    try:
        conn.execute_command(*args)
    except redis.ResponseError:
        return
    raise AssertionError(f"{args[0]} did not fail")


def _models_and_scripts(conn: redis.Redis) -> None:
    """Tensors, both backends, scripts: stored, run (one run fails), one reset, deleted both ways, renamed."""
    _run(conn, "AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    _run(conn, "AI.TENSORSET", "b", "FLOAT", 2, "VALUES", 3, 4)
    _run(conn, "AI.MODELSTORE", "mt", "TORCH", "CPU", "BLOB", models.torch_add())
    _run(conn, "AI.MODELEXECUTE", "mt", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    _run(conn, "AI.TENSORSET", "xo", "FLOAT", 1, 64, "VALUES", *([0.5] * 64))
    _run(conn, "AI.MODELSTORE", "mo", "ONNX", "CPU", "BLOB", models.onnx_mlp())
    _run(conn, "AI.MODELEXECUTE", "mo", "INPUTS", 1, "xo", "OUTPUTS", 1, "yo")
    _fails(conn, "AI.MODELEXECUTE", "mo", "INPUTS", 1, "a", "OUTPUTS", 1, "err-out")  # wrong shape: an error run
    _run(conn, "AI.TENSORSET", "err-out", "FLOAT", 1, "VALUES", 0)
    assert _run(conn, "AI.INFO", "mo")[-1] == 1  # the error was counted
    assert _run(conn, "AI.INFO", "mt", "RESETSTAT") == b"OK"
    _run(conn, "AI.SCRIPTSTORE", "{s}one", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    _run(conn, "AI.SCRIPTEXECUTE", "{s}one", "bar", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "sc")
    conn.rename("{s}one", "{s}two")  # the counters go with the hash: nothing stays under the old name
    for gone in ("m-del", "m-plain"):
        _run(conn, "AI.MODELSTORE", gone, "TORCH", "CPU", "BLOB", models.torch_add())
        _run(conn, "AI.MODELEXECUTE", gone, "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    _run(conn, "AI.MODELDEL", "m-del")
    conn.delete("m-plain")  # a plain DEL leaves nothing behind


def _dags_and_graphs(conn: redis.Redis) -> None:
    """A DAG that persists one output (its other names stay local), a stored graph run twice and once failing,
    and a graph deleted."""
    _run(conn, "AI.TENSORSET", "{d}in", "FLOAT", 2, "VALUES", 5, 6)
    _run(conn, "AI.DAGEXECUTE", "LOAD", 1, "{d}in", "PERSIST", 1, "{d}out", "|>",
         "AI.TENSORSET", "local", "FLOAT", 2, "VALUES", 1, 1, "|>",
         "AI.MODELEXECUTE", "mt", "INPUTS", 2, "{d}in", "local", "OUTPUTS", 1, "{d}out")
    for key in ("g", "g-gone"):
        _run(conn, "AI.GRAPHSTORE", key, "INPUTS", 1, "x", "OUTPUTS", 1, "y",
             "|>", "AI.MODELEXECUTE", "mt", "INPUTS", 2, "x", "x", "OUTPUTS", 1, "y")
    _run(conn, "AI.TENSORSET", "gx", "FLOAT", 2, "VALUES", 1, 2)
    for _ in range(2):
        _run(conn, "AI.GRAPHEXECUTE", "g", "INPUTS", 1, "gx", "OUTPUTS", 1, "gy")
    _fails(conn, "AI.GRAPHEXECUTE", "g", "INPUTS", 1, "nothing-here", "OUTPUTS", 1, "gy")
    _run(conn, "AI.GRAPHDEL", "g-gone")


def _every_listing(conn: redis.Redis) -> tuple[set[bytes], set[bytes], int, set[bytes]]:
    """KEYS *, a SCAN to the end, DBSIZE and what RANDOMKEY answers over many tries."""
    randoms: set[Any] = {conn.randomkey() for _ in range(200)}
    keys: list[Any] = conn.keys("*")
    return set(keys), set(conn.scan_iter(count=7)), int(conn.dbsize()), {key for key in randoms if key}


def test_after_every_kind_of_workload_only_the_users_keys_are_listed(client: redis.Redis) -> None:
    _models_and_scripts(client)
    _dags_and_graphs(client)
    keys, scanned, size, randoms = _every_listing(client)
    assert keys == USER_KEYS, keys ^ USER_KEYS
    assert scanned == USER_KEYS and size == len(USER_KEYS)
    assert randoms <= USER_KEYS and randoms


def test_every_counter_lives_in_its_objects_hash_and_goes_with_it(client: redis.Redis) -> None:
    """The counters of a model are fields of its hash; DEL takes them; a re-store starts them from zero."""
    _run(client, "AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    _run(client, "AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    _run(client, "AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    fields = client.hmget("m", ["calls", "samples", "errors", "run_info"])
    assert fields == [b"1", b"2", b"0", b"m"]
    client.delete("m")
    assert set(client.keys("*")) == {b"a", b"c"}
    _run(client, "AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    assert _run(client, "AI.INFO", "m")[14:] == [b"calls", 0, b"errors", 0]


def test_an_older_releases_counters_move_into_their_objects_at_start(server: RunningServer, store_url: str) -> None:
    """Counters an older release kept in ``__redisai_stats__:<key>`` hashes (on a cluster with a tag in the
    object's slot) move into the object's hash when a server starts; counters whose object is gone or another
    one are dropped. AI.INFO then answers them, and only the user's keys are left."""
    store = server.server.ctx.store
    on_cluster = store.kind == "cluster"
    url = f"unix://{store.process.socket_path}" if isinstance(store, EmbeddedStore) else store_url
    direct: Any = RedisCluster.from_url(url) if on_cluster else redis.Redis.from_url(url)
    legacy = "__redisai_stats__:{L}" if on_cluster else "__redisai_stats__:"
    _run(server.client(), "AI.MODELSTORE", "{L}m", "TORCH", "CPU", "BLOB", models.torch_add())
    direct.hset("{L}m", "run_info", "5eed")  # as an older release stored it: its id, its counters beside it
    direct.hdel("{L}m", "calls", "duration", "samples", "errors")
    direct.hset(legacy + "{L}m", mapping={"run_info": "5eed", "calls": 3, "duration": 7, "samples": 6, "errors": 1})
    direct.hset(legacy + "{L}gone", mapping={"run_info": "0ld", "calls": 1, "duration": 0, "samples": 0, "errors": 0})
    with running_server(Config(port=0, redis_url=url, shutdown_timeout=2.0)) as upgraded:
        info = _run(upgraded.client(), "AI.INFO", "{L}m")
    assert info[10:] == [b"duration", 7, b"samples", 6, b"calls", 3, b"errors", 1]
    assert set(direct.keys("*", target_nodes="all") if on_cluster else direct.keys("*")) == {b"{L}m"}
    direct.close()


def _metadata_reads(direct: Any) -> int:
    """HMGET calls the store (every primary of a cluster) has served: the cache's metadata reads, and nothing
    else a run sends (its write script reads the model with HGET)."""
    if isinstance(direct, RedisCluster):
        sections = list(direct.info("commandstats", target_nodes=RedisCluster.PRIMARIES).values())
    else:
        sections = [direct.info("commandstats")]
    return sum(int(section.get("cmdstat_hmget", {}).get("calls", 0)) for section in sections)


def _sum_of(conn: redis.Redis, model: str, out: str) -> list[float]:
    _run(conn, "AI.MODELEXECUTE", model, "INPUTS", 2, "{k}a", "{k}b", "OUTPUTS", 1, out)
    return [float(value) for value in _run(conn, "AI.TENSORGET", out, "VALUES")]


def test_runs_read_no_metadata_while_the_model_stays_the_same(
        shared_store: tuple[redis.Redis, redis.Redis, Any]) -> None:
    """Each run adds to its model's counters, in the model's own hash: the store invalidates the metadata every
    server cached, yet the runs after it read none of it again (the unconfirmed entry serves them; it is read
    again at most once every CONFIRM_WITHIN_S). Runs through another server too."""
    ours, theirs, direct = shared_store
    _run(ours, "AI.TENSORSET", "{k}a", "FLOAT", 2, "VALUES", 1, 2)
    _run(ours, "AI.TENSORSET", "{k}b", "FLOAT", 2, "VALUES", 3, 4)
    _run(ours, "AI.MODELSTORE", "{k}m", "TORCH", "CPU", "BLOB", models.torch_add())
    for _ in range(2):  # the metadata cached on both servers, and invalidated by the runs' counters
        assert _sum_of(ours, "{k}m", "{k}c") == [4, 6] and _sum_of(theirs, "{k}m", "{k}d") == [4, 6]
    runs = 200
    before = _metadata_reads(direct)
    for _ in range(runs // 2):
        assert _sum_of(ours, "{k}m", "{k}c") == [4, 6] and _sum_of(theirs, "{k}m", "{k}d") == [4, 6]
    # one read a run before; now each server reads again at most once a CONFIRM_WITHIN_S (1 s): the 200 runs
    # would have to take over 24 s to reach a quarter of them
    assert _metadata_reads(direct) - before < runs // 4
    assert _run(ours, "AI.INFO", "{k}m")[-3] == runs + 4  # every run counted, through either server


def test_a_model_stored_again_through_another_server_is_never_run_stale(
        shared_store: tuple[redis.Redis, redis.Redis, Any]) -> None:
    """Our server holds the model's metadata (unconfirmed after its runs); another server stores another model
    under the key. Our next run computes with the new one (its write found the digest changed: it was done
    again on what the store holds), AI.MODELGET and AI.INFO answer the new one, and it is counted once."""
    ours, theirs, _direct = shared_store
    _run(ours, "AI.TENSORSET", "{k}a", "FLOAT", 2, "VALUES", 1, 2)
    _run(ours, "AI.TENSORSET", "{k}b", "FLOAT", 2, "VALUES", 3, 4)
    blobs = {"add": models.torch_add(), "mul": models.torch_mul()}
    results = {"add": [4.0, 6.0], "mul": [3.0, 8.0]}
    _run(ours, "AI.MODELSTORE", "{k}m", "TORCH", "CPU", "BLOB", blobs["add"])
    for _ in range(3):
        assert _sum_of(ours, "{k}m", "{k}c") == results["add"]
    for name in ("mul", "add", "mul"):
        _run(theirs, "AI.MODELSTORE", "{k}m", "TORCH", "CPU", "TAG", name, "BLOB", blobs[name])
        for _ in range(2):
            assert _sum_of(ours, "{k}m", "{k}c") == results[name], name
        assert _run(ours, "AI.MODELGET", "{k}m", "BLOB") == blobs[name]
        info = _run(ours, "AI.INFO", "{k}m")
        assert info[9] == name.encode() and info[-3] == 2, info  # tag; calls: each run once
