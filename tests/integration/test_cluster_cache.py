"""The coherent model-metadata cache on a Redis Cluster (server/store/cache.py): repeated runs read the
model's metadata from it, and a model re-stored through another server in front of the same cluster is never
run stale — even with this server's invalidation pushes lost, and even when the model's slot holds no output
(its digest is then checked alone on its own shard), and when the model's slot moved meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from backends.objects import MODEL_META_FIELDS
from server.store.cache import NodeCaches
from server.store.cluster_keys import key_slot
from tests.cluster_support import LocalCluster, assign_slot, keys_on_three_shards, lose_pushes, owner, served_by
from tests.models import torch_add, torch_matmul, torch_mul
from tests.support import RunningServer, wait_until

ONE_TWO = b"\x00\x00\x80?\x00\x00\x00@"  # float32 [1, 2]
THREE_FOUR = b"\x00\x00@@\x00\x00\x80@"  # float32 [3, 4]
SUM, PRODUCT = [4.0, 6.0], [3.0, 8.0]




@pytest.fixture
def layout(cluster: LocalCluster) -> tuple[str, str, str, str]:
    """The model, the two inputs and the output: the model alone on its shard, no output in its slot."""
    model, a, c = keys_on_three_shards(cluster, "cc")
    b = next(f"{a}x{i}" for i in range(1000) if owner(cluster, f"{a}x{i}").port == owner(cluster, a).port)
    return model, a, b, c


def _values(conn: redis.Redis, key: str) -> list[float]:
    return [float(v) for v in conn.execute_command("AI.TENSORGET", key, "VALUES")]


def _info(conn: redis.Redis, name: str) -> int:
    return int(conn.info("ai")[name])


def _inputs(conn: redis.Redis, a: str, b: str) -> None:
    conn.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", ONE_TWO)
    conn.execute_command("AI.TENSORSET", b, "FLOAT", 2, "BLOB", THREE_FOUR)


def _run(conn: redis.Redis, model: str, a: str, b: str, c: str) -> None:
    assert conn.execute_command("AI.MODELEXECUTE", model, "INPUTS", 2, a, b, "OUTPUTS", 1, c) == b"OK"


def _hits_of_five_runs(conn: redis.Redis, model: str, a: str, b: str, c: str) -> int:
    """The model stored, its inputs set and one run made; the cache hits of five more runs (each checked)."""
    conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _inputs(conn, a, b)
    _run(conn, model, a, b, c)
    before = _info(conn, "ai_cache_hits")
    for _ in range(5):
        _run(conn, model, a, b, c)
        assert _values(conn, c) == SUM
    return _info(conn, "ai_cache_hits") - before


def test_cached_metadata_is_held_for_a_model_on_any_shard(
        cluster: LocalCluster, cluster_servers: tuple[RunningServer, RunningServer]) -> None:
    """The keyspace asks the cache's ``held`` first (no coroutine, no round trip): on a cluster it must look in
    the cache of the node serving each key — it looked in the first node's only, so a model on another shard
    went the long way every run. Keys of two nodes are held together too, each from its node's cache (a run
    whose inputs share its outputs' slot, its model elsewhere; a stored graph's models). A run's read is checked:
    the metadata its runs' counters left unconfirmed serves it (server/store/cache.py)."""
    models = keys_on_three_shards(cluster, "hd")
    conn = cluster_servers[0].client()
    _inputs(conn, "{hd}a", "{hd}b")
    for model in models:
        conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
        _run(conn, model, "{hd}a", "{hd}b", "{hd}c")
    server = cluster_servers[0].server
    cache = server.ctx.store.cache

    async def held(keys: list[str]) -> list[Any] | None:
        return cache.held(0, [(b"HMGET", key.encode(), *MODEL_META_FIELDS) for key in keys], checked=True)

    for model in models:
        found = asyncio.run_coroutine_threadsafe(held([model]), cluster_servers[0].loop).result(10)
        assert found is not None, model
        assert found[0] == owner(cluster, model).client().hmget(model, list(MODEL_META_FIELDS)), model
    both = asyncio.run_coroutine_threadsafe(held(models[:2]), cluster_servers[0].loop).result(10)
    assert both == [owner(cluster, model).client().hmget(model, list(MODEL_META_FIELDS)) for model in models[:2]]
    assert asyncio.run_coroutine_threadsafe(held([*models[:2], "{hd}never"]), cluster_servers[0].loop).result(10) is None


def test_a_run_sends_one_script_to_the_models_shard_its_digest_check_and_counters_together(
        cluster_servers: tuple[RunningServer, RunningServer], layout: tuple[str, str, str, str], cluster: LocalCluster) -> None:
    """The model's slot holds no output: its digest check (a SET_TENSORS with no tensor) carries the run's AI.INFO
    counters, which live in the model's slot — one EVALSHA on that shard a run, where RECORD_RUN went beside it.
    The counters still count every run."""
    model, a, b, c = layout
    conn = cluster_servers[0].client()
    conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _inputs(conn, a, b)
    _run(conn, model, a, b, c)  # the metadata is cached from here on
    node = owner(cluster, model).client()
    with node.monitor() as monitor:
        _run(conn, model, a, b, c)
        node.execute_command("ECHO", "done")  # a marker on this node, after the run
        seen = []
        for event in monitor.listen():
            seen.append(event["command"])
            if event["command"] == "ECHO done":
                break
    assert len([command for command in seen if command.startswith("EVALSHA")]) == 1, seen
    info = conn.execute_command("AI.INFO", model)
    assert info[info.index(b"calls") + 1] == 2


def test_a_model_restored_through_another_server_is_never_run_stale(
        cluster_servers: tuple[RunningServer, RunningServer], layout: tuple[str, str, str, str]) -> None:
    model, a, b, c = layout
    ours, theirs = (server.client() for server in cluster_servers)
    _inputs(ours, a, b)
    for i in range(20):
        blob, expected = (torch_add(), SUM) if i % 2 else (torch_mul(), PRODUCT)
        assert theirs.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", blob) == b"OK"
        for _ in range(2):
            _run(ours, model, a, b, c)
            assert _values(ours, c) == expected


def test_with_every_push_lost_the_digest_check_on_the_models_shard_runs_it_again(
        cluster_servers: tuple[RunningServer, RunningServer], layout: tuple[str, str, str, str]) -> None:
    """The model's slot holds no output: its digest is checked alone on its shard in the write's round trip;
    STALEMODEL there makes the run be done again with the store's model before OK. AI.INFO counts it once."""
    model, a, b, c = layout
    ours, theirs = (server.client() for server in cluster_servers)
    ours.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _inputs(ours, a, b)
    _run(ours, model, a, b, c)
    _run(ours, model, a, b, c)  # the metadata is cached now
    lose_pushes(cluster_servers[0])
    for i in range(6):
        blob, expected = (torch_add(), SUM) if i % 2 else (torch_mul(), PRODUCT)
        theirs.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", blob)
        _run(ours, model, a, b, c)
        assert _values(ours, c) == expected
        info = ours.execute_command("AI.INFO", model)
        assert info[info.index(b"calls") + 1] == 1  # the re-store zeroed it; the stale run and its redo: once


def test_a_lost_tracking_connection_drops_that_nodes_entries(
        cluster: LocalCluster, cluster_servers: tuple[RunningServer, RunningServer],
        layout: tuple[str, str, str, str]) -> None:
    model, a, b, c = layout
    conn = cluster_servers[0].client()
    conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _inputs(conn, a, b)
    _run(conn, model, a, b, c)
    assert _info(conn, "ai_cache_entries") >= 1
    node = owner(cluster, model).client()
    tracking = [c for c in node.client_list() if "t" in c.get("flags", "")]
    assert tracking, "no tracking connection on the model's node"
    for entry in tracking:
        node.client_kill_filter(_id=entry["id"])
    assert wait_until(lambda: _info(conn, "ai_cache_entries") == 0, timeout=10)
    _run(conn, model, a, b, c)  # read again over a new tracking connection
    assert _values(conn, c) == SUM


def test_a_changed_slot_map_drops_the_cache_and_the_moved_model_is_not_run_stale(
        cluster: LocalCluster, cluster_servers: tuple[RunningServer, RunningServer]) -> None:
    """The model's (emptied) slot is handed to another primary behind the servers' backs and a new model is
    stored there through B, while A's pushes are lost and its map is stale: A's cached entry is wrong, and its
    digest check goes to the old owner (MOVED), then to the new one (STALEMODEL): the run is done again."""
    model, a, c = keys_on_three_shards(cluster, "mv")
    b = a  # one input twice is enough here
    ours, theirs = (server.client() for server in cluster_servers)
    ours.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", ONE_TWO)
    _run(ours, model, a, b, c)
    _run(ours, model, a, b, c)
    assert _values(ours, c) == [2.0, 4.0]
    lose_pushes(cluster_servers[0])
    slot = key_slot(model.encode())
    source = owner(cluster, model)
    target = next(node for node in cluster.primaries() if node.port not in (source.port, owner(cluster, c).port))
    source.client().delete(model, *source.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100))
    assign_slot(cluster, slot, target)
    try:
        assert wait_until(lambda: served_by(cluster, model, target))
        assert theirs.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_mul()) == b"OK"
        _run(ours, model, a, b, c)
        assert _values(ours, c) == [1.0, 4.0]
        assert wait_until(lambda: _info(ours, "ai_cache_entries") <= 1, timeout=10)  # the map changed: dropped
    finally:
        target.client().delete(model, *target.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100))
        assign_slot(cluster, slot, source)
        assert wait_until(lambda: served_by(cluster, model, source))



@pytest.fixture(params=["one slot", "model on another shard", "inputs on other shards", "three shards"])
def run_layout(request: pytest.FixtureRequest, cluster: LocalCluster,
               layout: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
    """The model, the two inputs and the output: all in one slot; the model on another shard; the model in the
    output's slot and the inputs on other shards; ``layout``, whose model, inputs and output are on three."""
    model, a, b, c = "{os}m", "{os}a", "{os}b", "{os}c"
    apart = [k for k in keys_on_three_shards(cluster, "os") if owner(cluster, k).port != owner(cluster, c).port]
    if request.param == "model on another shard":
        model = apart[0]
    elif request.param == "inputs on other shards":
        a, b = apart
    elif request.param == "three shards":
        return layout
    return model, a, b, c


def test_inputs_come_from_the_cache_whatever_their_slot(
        cluster_servers: tuple[RunningServer, RunningServer], run_layout: tuple[str, str, str, str]) -> None:
    """A run's inputs are taken from the cache: the outputs' write script checks those in its slot, a check on
    their own shard in the same round trip the others."""
    assert 4 * 3 <= _hits_of_five_runs(cluster_servers[0].client(), *run_layout) <= 5 * 3  # metadata and inputs


def test_with_every_push_lost_a_stale_cached_input_is_never_answered_but_run_again(
        cluster_servers: tuple[RunningServer, RunningServer], run_layout: tuple[str, str, str, str]) -> None:
    """Each input taken from the cache is compared with its shard's value (STALEINPUT), by the outputs' write
    script in their slot (nothing written), by a check on its own shard elsewhere (in parallel with the write,
    which the run done again overwrites before OK): the run is done again on the store's values and AI.INFO
    counts each request once. An input deleted meanwhile answers the store's error (with nothing written in
    the outputs' slot; apart, the stale run's outputs stay)."""
    model, a, b, c = run_layout
    ours, theirs = (server.client() for server in cluster_servers)
    ours.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _inputs(ours, a, b)
    for _ in range(2):  # the second run takes the inputs from the cache
        _run(ours, model, a, b, c)
    lose_pushes(cluster_servers[0])
    for i in range(4):
        value, expected = (ONE_TWO, SUM) if i % 2 else (THREE_FOUR, [6.0, 8.0])
        theirs.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", value)
        _run(ours, model, a, b, c)
        assert _values(ours, c) == expected
    info = ours.execute_command("AI.INFO", model)
    assert info[info.index(b"calls") + 1] == 6
    theirs.execute_command("AI.TENSORSET", c, "FLOAT", 2, "BLOB", THREE_FOUR)
    theirs.delete(a)
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _run(ours, model, a, b, c)
    # in the outputs' slot the check refuses the write; apart, the stale run's outputs (from the cached ONE_TWO)
    # were written beside the check that failed (docs/deployment.md, "What is atomic on a cluster")
    assert _values(ours, c) == ([3.0, 4.0] if key_slot(a.encode()) == key_slot(c.encode()) else SUM)


def test_an_error_computed_from_a_stale_cached_input_is_never_answered(
        cluster_servers: tuple[RunningServer, RunningServer], run_layout: tuple[str, str, str, str]) -> None:
    """A run that fails on a cached input checks it with its counters (on the input's shard): changed meanwhile,
    and the run is done again on the store's values instead of answering the stale error."""
    model, a, b, c = run_layout
    ours, theirs = (server.client() for server in cluster_servers)
    ours.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _inputs(ours, a, b)
    _run(ours, model, a, b, c)
    ours.execute_command("AI.TENSORSET", a, "FLOAT", 3, "BLOB", ONE_TWO + ONE_TWO[:4])
    for _ in range(2):  # the second run takes the 3-element input from the cache
        with pytest.raises(redis.ResponseError, match="size of tensor"):
            _run(ours, model, a, b, c)
    lose_pushes(cluster_servers[0])
    theirs.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", THREE_FOUR)
    _run(ours, model, a, b, c)
    assert _values(ours, c) == [6.0, 8.0]


def test_an_error_computed_from_a_stale_cached_model_is_never_answered(
        cluster_servers: tuple[RunningServer, RunningServer], run_layout: tuple[str, str, str, str]) -> None:
    """A run that fails on the model it took from the cache checks the model's digest with its counters (on the
    model's shard): re-stored meanwhile through another server, the run is done again with the store's model
    instead of answering the stale model's error."""
    model, a, b, c = run_layout
    ours, theirs = (server.client() for server in cluster_servers)
    ours.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_matmul())
    for key in (a, b):
        ours.execute_command("AI.TENSORSET", key, "FLOAT", 1, 2, "BLOB", ONE_TWO)
    for _ in range(2):  # the second run takes the model's metadata from the cache
        with pytest.raises(redis.ResponseError, match="mat1 and mat2 shapes cannot be multiplied"):
            ours.execute_command("AI.MODELEXECUTE", model, "INPUTS", 2, a, b, "OUTPUTS", 1, c)
    lose_pushes(cluster_servers[0])
    theirs.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    _run(ours, model, a, b, c)
    assert _values(ours, c) == [2.0, 4.0]


def test_a_write_through_this_server_drops_what_it_cached_of_the_key_with_every_push_lost(
        cluster_servers: tuple[RunningServer, RunningServer], run_layout: tuple[str, str, str, str]) -> None:
    """Our own AI.MODELSTORE and AI.TENSORSET drop the written key's entries from the cache of the node that
    serves it (``TrackedCache.forget``), pushes or no pushes: the next run reads both again — no cache hit
    for them, no stale value to be checked and redone — and answers the new model on the new input."""
    model, a, b, c = run_layout
    conn = cluster_servers[0].client()
    assert _hits_of_five_runs(conn, model, a, b, c) >= 4 * 3  # the model and both inputs are cached
    lose_pushes(cluster_servers[0])
    conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_mul())
    conn.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", THREE_FOUR)
    hits, misses = _info(conn, "ai_cache_hits"), _info(conn, "ai_cache_misses")
    _run(conn, model, a, b, c)
    assert _values(conn, c) == [9.0, 16.0]
    assert _info(conn, "ai_cache_hits") - hits <= 1  # b's entry alone: the model's and a's were forgotten
    assert _info(conn, "ai_cache_misses") - misses >= 2


def test_a_read_whose_node_groups_were_made_under_an_earlier_map_reads_through_the_link(
        cluster: LocalCluster, cluster_servers: tuple[RunningServer, RunningServer],
        layout: tuple[str, str, str, str]) -> None:
    """A read of keys on several nodes groups them by the map of the moment; should the map change while one
    group's read waits, the later groups are read through the cluster link, not from the caches of nodes
    numbered under the earlier map — where an entry filled after the change may sit that no write of ours
    forgets (``TrackedCache.forget`` drops the serving node's entries only). Here such an entry is planted:
    read with the groups' map current, it is answered from the cache; with the map changed since, from the
    store."""
    model, a, b, c = layout
    server = cluster_servers[0]
    conn = server.client()
    _hits_of_five_runs(conn, model, a, b, c)  # the model's metadata and the inputs cached on their nodes
    cache = server.server.ctx.store.cache
    nodes = cache._dbs[0]
    assert isinstance(nodes, NodeCaches)
    router = nodes.router
    commands = [(b"HMGET", model.encode(), *MODEL_META_FIELDS), (b"GET", a.encode())]

    async def read(map_changed: bool) -> tuple[list[Any], list[bool]]:
        node = nodes.at(router.node_number(a.encode()))
        assert node is not None
        value, size = node._entries[commands[1]]
        node._entries[commands[1]] = (b"planted", size)  # what a fill after a map change could leave there
        groups: dict[int, list[int]] = {}
        for index, command in enumerate(commands):
            groups.setdefault(router.node_number(command[1]), []).append(index)
        grouped_under = object() if map_changed else router.numbering()
        found = [False] * len(commands)
        try:
            return await cache._read_groups(nodes, commands, groups, found, grouped_under, True), found
        finally:
            node._entries[commands[1]] = (value, size)

    def read_on_its_loop(map_changed: bool) -> tuple[list[Any], list[bool]]:
        return asyncio.run_coroutine_threadsafe(read(map_changed), server.loop).result(10)

    replies, found = read_on_its_loop(map_changed=False)
    assert replies[1] == b"planted" and found == [True, True]
    replies, found = read_on_its_loop(map_changed=True)
    assert replies[1] == owner(cluster, a).client().get(a) != b"planted" and found == [False, False]
