"""The coherent in-process cache (server/store/cache.py): hits save round trips, and nothing is ever served
stale — whoever writes: this server, another server on the same store, a client of the store itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import redis

from backends.errors import AIError
from server.config import Config
from server.store.embedded import EmbeddedStore
from tests.models import torch_add, torch_double, torch_matmul, torch_mul
from tests.support import RunningServer, running_server

ONE_TWO = b"\x00\x00\x80?\x00\x00\x00@"  # float32 [1, 2]
THREE_FOUR = b"\x00\x00@@\x00\x00\x80@"  # float32 [3, 4]


def _values(conn: redis.Redis, key: str) -> list[float]:
    return [float(v) for v in conn.execute_command("AI.TENSORGET", key, "VALUES")]


def _raw(direct: redis.Redis, key: str) -> bytes:
    value = direct.get(key)
    assert isinstance(value, bytes)
    return value


def _hits(conn: redis.Redis) -> int:
    return int(conn.info("ai")["ai_cache_hits"])


def test_repeated_runs_read_the_model_metadata_from_the_cache(server: RunningServer) -> None:
    conn = server.client()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    before = _hits(conn)
    for _ in range(5):
        assert conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
    assert _hits(conn) >= before + 4


def test_a_run_on_stale_cached_metadata_is_never_written_but_run_again(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """Even with every invalidation lost, the output write checks the model's digest (STALEMODEL) and the
    run is done again with the model the store holds; AI.INFO counts it once."""
    ours, theirs, _direct = shared_store
    _ran_add_then_lost_pushes(ours, server)
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_mul())
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    assert _values(ours, "c") == [3.0, 8.0]
    info = ours.execute_command("AI.INFO", "m")
    assert info[info.index(b"calls") + 1] == 1  # the re-store zeroed it; the stale run and its redo count once


def test_a_tensor_written_through_another_server_is_never_read_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, theirs, _direct = shared_store
    for i in range(100):
        theirs.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", i)
        assert _values(ours, "t") == [i]
        assert _values(ours, "t") == [i]  # the second read may be a hit: still the same value


def test_a_model_restored_through_another_server_is_never_run_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("AI.TENSORSET", "b", "FLOAT", 2, "BLOB", THREE_FOUR)
    for i in range(30):
        blob, expected = (torch_add(), [4.0, 6.0]) if i % 2 else (torch_mul(), [3.0, 8.0])
        assert theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", blob) == b"OK"
        for _ in range(2):
            assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
            assert _values(ours, "c") == expected


def _drop_pushes(server: RunningServer) -> None:
    """Lose every invalidation push from now on: whatever our cache holds goes stale."""
    for link in server.server.ctx.store.cache.tracking_links():
        link._on_invalidate = lambda keys: None


def _ran_add_then_lost_pushes(ours: redis.Redis, server: RunningServer) -> None:
    """"m" adds "a" and "b" into "c", run once (its metadata now cached); then every push is lost."""
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("AI.TENSORSET", "b", "FLOAT", 2, "BLOB", THREE_FOUR)
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    _drop_pushes(server)  # our cached metadata goes stale


def _calls(conn: redis.Redis, key: str) -> int:
    info = conn.execute_command("AI.INFO", key)
    return int(info[info.index(b"calls") + 1])


def test_repeated_runs_read_their_inputs_from_the_cache_too(server: RunningServer) -> None:
    conn = server.client()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")  # output key now ours
    before = _hits(conn)
    for _ in range(5):
        assert conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
        assert _values(conn, "c") == [2, 4]
    assert _hits(conn) >= before + 4 * 3  # the metadata and both inputs, from the second run on


def test_an_output_stays_known_while_our_write_is_in_flight_and_not_after_a_refused_one(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A run skips its output's pre-run type check when that key last held a tensor we wrote. Our own tensor
    write in flight keeps that so (50 clients of one model into one output key would otherwise all miss the
    cache and check again); a write the store refuses (the key retyped behind our back) drops it."""
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    tensor = _raw(direct, "t")
    keyspace = server.server.ctx.keyspace(0)

    async def write_and_look_meanwhile() -> tuple[bool, bool]:
        await keyspace.set_tensors([b"o"], [tensor])
        before = keyspace.known_tensors([b"o"])
        writing = asyncio.ensure_future(keyspace.set_tensors([b"o"], [tensor]))
        await asyncio.sleep(0)  # the write has left; its reply is not read before the next poll
        meanwhile = keyspace.known_tensors([b"o"]) and not writing.done()
        await writing
        return before, meanwhile

    assert asyncio.run_coroutine_threadsafe(write_and_look_meanwhile(), server.loop).result(10) == (True, True)
    direct.delete("o")
    direct.rpush("o", "x")  # not a key we track: we do not hear of it
    assert keyspace.known_tensors([b"o"])
    refused = asyncio.run_coroutine_threadsafe(keyspace.set_tensors([b"o"], [tensor]), server.loop)
    with pytest.raises(AIError, match=r"^WRONGTYPE"):
        refused.result(10)
    assert not keyspace.known_tensors([b"o"])


def test_an_input_written_through_another_server_is_never_run_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    for i in range(60):
        theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 1, "VALUES", i)
        for _ in range(2):  # the second run may take its input from the cache: still the same value
            assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
            assert _values(ours, "c") == [2 * i]


def test_a_run_on_a_stale_cached_input_is_never_written_but_run_again(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """Even with every invalidation lost, the output write compares each input the run took from the cache
    with what the store holds (STALEINPUT), and the run is done again on the store's values; AI.INFO counts
    each request once."""
    ours, theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    for _ in range(2):  # the second run takes "a" from the cache
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", THREE_FOUR)
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [6, 8]
    assert _calls(ours, "m") == 3
    direct.delete("a")
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    assert _values(ours, "c") == [6, 8]  # nothing written
    theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    direct.delete("a")
    direct.rpush("a", "not a tensor")
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    assert _values(ours, "c") == [2, 4]


def test_an_error_computed_from_a_stale_cached_input_is_never_answered(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A run that fails (here on shapes) checks its cached inputs with its counters: one changed meanwhile,
    and the run is done again on the store's values instead of answering the stale error."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("AI.TENSORSET", "b", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 3, "BLOB", ONE_TWO + ONE_TWO[:4])
    for _ in range(2):  # the second run takes the 3-element "a" from the cache
        with pytest.raises(redis.ResponseError, match="size of tensor"):
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    assert theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", THREE_FOUR) == b"OK"
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [4, 6]


def test_an_error_computed_from_a_stale_cached_model_is_never_answered(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A run that fails (here a matrix product of shapes that do not multiply) checks the digest of the model
    it took from the cache with its counters: re-stored meanwhile through another server, the run is done again
    with the store's model instead of answering the stale model's error."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_matmul())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 1, 2, "BLOB", ONE_TWO)
    for _ in range(2):  # the second run takes the model's metadata from the cache
        with pytest.raises(redis.ResponseError, match="mat1 and mat2 shapes cannot be multiplied"):
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    assert theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add()) == b"OK"
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [2.0, 4.0]
    assert _calls(ours, "m") == 1  # the re-store zeroed the counters; the request counts once


class _StoresTheOtherVersion:
    """A loaded model that, each time it runs, has the other version stored over it first (through another
    server): every run then overlaps a re-store, deterministically."""

    def __init__(self, model: Any, store_other: Callable[[], None]) -> None:
        self.model = model
        self.store_other = store_other
        self.input_names = model.input_names
        self.output_names = model.output_names

    def run(self, inputs: list[Any]) -> list[Any]:
        self.store_other()
        return list(self.model.run(inputs))


@pytest.mark.parametrize("cache_mb", [64, 0], ids=["cache", "no-cache"])
def test_a_model_stored_again_during_every_run_is_answered_as_redisai_does(
        cache_mb: int, server: RunningServer, store_url: str) -> None:
    """RedisAI runs the model it read when the command came, whatever is stored meanwhile. A run whose model
    came from our cache is written only if the store still holds it (STALEMODEL), and done again on the
    store's model; that second run, and any run on what it read from the store, is written as it is. Here each
    run has the other version stored over it: with the cache, add's cached run is done again with mul, the
    store's then; without it, the first run is written. Both answered STALEMODEL's raw error before."""
    store = server.server.ctx.store
    url = f"unix://{store.process.socket_path}" if isinstance(store, EmbeddedStore) else store_url
    config = Config(port=0, redis_url=url, shutdown_timeout=2.0, cache_mb=cache_mb)
    with running_server(config) as ours_server, running_server(Config(port=0, redis_url=url)) as theirs_server:
        ours, theirs = ours_server.client(), theirs_server.client()
        blobs = {"add": torch_add(), "mul": torch_mul()}
        ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
        ours.execute_command("AI.TENSORSET", "b", "FLOAT", 2, "BLOB", THREE_FOUR)
        for name in ("mul", "add"):  # both versions loaded; "add" stored now, its metadata cached
            ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", blobs[name])
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
        loaded = ours_server.server.ctx.ai.models._built
        assert len(loaded) == 2
        for key, model, other in zip(list(loaded), list(loaded.values()), ("add", "mul"), strict=True):
            loaded[key] = _StoresTheOtherVersion(model, partial(theirs.execute_command, "AI.MODELSTORE", "m",
                                                                "TORCH", "CPU", "BLOB", blobs[other]))
        assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
        assert _values(ours, "c") == ([3.0, 8.0] if cache_mb else [4.0, 6.0])


def test_a_model_stored_again_while_it_was_being_loaded_is_never_kept_as_the_old_version(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A run whose cached metadata is of one version and whose blob, read on a loaded-handle miss, is of
    another: the handle must not be filed under the first version's digest (then, that version stored again,
    every run would use the other one's model, and its write check would pass)."""
    ours, theirs, _direct = shared_store
    _ran_add_then_lost_pushes(ours, server)
    server.server.ctx.ai.models._built.clear()  # as when other models pushed it out of the loaded ones
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_mul())
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [3.0, 8.0]
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())  # the first version again
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [4.0, 6.0]


def test_an_error_found_on_stale_cached_metadata_before_the_run_is_never_answered(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """The number of inputs is checked against the model's metadata before the run: with our cached metadata
    of a two-input model, and the store holding a one-input one (its invalidation still on its way), the
    run is checked again on the store's metadata rather than answering the old version's arity error."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [2.0, 4.0]
    assert _calls(ours, "m") == 1
    with pytest.raises(redis.ResponseError, match="Number of keys given as INPUTS here does not match"):
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")  # a true error


def test_a_model_missing_when_cached_and_stored_since_is_run(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A missing model's reply is cached too; stored meanwhile through another server (invalidation lost),
    the run answers neither "model key is empty" nor the WRONGTYPE that the cached reply and a fresh
    EXISTS would make together."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    with pytest.raises(redis.ResponseError, match="model key is empty"):
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "a", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [2.0, 4.0]


def test_swapdb_by_a_client_of_the_store_is_followed(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    """SWAPDB sends no invalidation to tracking clients, so our cache keeps database 0's old entries: every
    run is still answered from the store's values (the pre-run errors read again, the write checks the
    model's digest and the cached inputs), and each stale entry is replaced at its first use."""
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.execute_command("SELECT", 1)
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_mul())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", THREE_FOUR)
    ours.execute_command("SELECT", 0)
    for _ in range(2):  # cached from the second on
        assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "a", "OUTPUTS", 1, "c") == b"OK"
    direct.swapdb(0, 1)
    for _ in range(2):
        assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
        assert _values(ours, "c") == [9.0, 16.0]
    direct.swapdb(0, 1)
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [2.0, 4.0]


def test_a_tf_model_stored_again_with_other_output_names_is_never_run_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """The same TF graph stored with another output node computes something else: its digest differs, so a
    run on the cached metadata of the first is checked and done again (before, only the blob was digested,
    and the old output node's values were written and answered OK)."""
    from tests.tf_models import tf_dense  # (TensorFlow's import is slow: only here)

    ours, theirs, _direct = shared_store
    blob = tf_dense()
    store = ("AI.MODELSTORE", "m", "TF", "CPU", "INPUTS", 1, "x", "OUTPUTS", 1)
    ours.execute_command(*store, "logits", "BLOB", blob)
    ours.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 4, "VALUES", 1, 2, 3, 4)
    for _ in range(2):
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
    logits = _values(ours, "y")
    _drop_pushes(server)
    theirs.execute_command(*store, "probs", "BLOB", blob)
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "x", "OUTPUTS", 1, "y") == b"OK"
    probs = _values(ours, "y")
    assert abs(sum(probs) - 1.0) < 1e-5 and probs != logits
    assert probs == _values(theirs, "y")


def test_a_cached_input_deleted_or_retyped_meanwhile_answers_the_stores_error(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """The write's comparison also fails for a key that is gone (GET: nil) or no longer a string (an error):
    the run is done again, and the error is the store's, with nothing written."""
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())

    def delete() -> None:
        direct.delete("a")

    def make_a_list() -> None:
        direct.delete("a")
        direct.rpush("a", "x")

    for change, error in ((delete, "tensor key is empty"), (make_a_list, r"^WRONGTYPE")):
        server.server.ctx.store.cache.clear()
        ours.delete("a")
        ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", ONE_TWO)
        for _ in range(2):  # the second run takes "a" from the cache
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
        links = server.server.ctx.store.cache.tracking_links()
        saved = [link._on_invalidate for link in links]
        _drop_pushes(server)
        change()
        with pytest.raises(redis.ResponseError, match=error):
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
        assert _values(ours, "c") == [2, 4]
        for link, handler in zip(links, saved, strict=True):
            link._on_invalidate = handler


def test_a_missing_input_is_never_answered_from_the_cache(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """"tensor key is empty" has no write to check it: a cached miss is read again from the store."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "c", "FLOAT", 2, "BLOB", ONE_TWO)
    for _ in range(2):
        with pytest.raises(redis.ResponseError, match="tensor key is empty"):
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", THREE_FOUR)
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [6, 8]


def test_an_input_that_was_not_a_tensor_is_read_again(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A cached value that does not decode answers no error: it is read again from the store first."""
    ours, theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "c", "FLOAT", 2, "BLOB", ONE_TWO)
    ours.set("a", "not a tensor")
    for _ in range(2):
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    _drop_pushes(server)
    direct.delete("a")
    theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", THREE_FOUR)
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
    assert _values(ours, "c") == [6, 8]


def test_large_inputs_we_wrote_are_kept_and_checked_by_their_stamp(server: RunningServer) -> None:
    """A tensor this server wrote is kept whatever its size (up to a quarter of the budget): the run's write
    compares its stamp, a few bytes, not the value (docs/tensor-format.md)."""
    conn = server.client()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    big = np.arange(150_000, dtype=np.float32)  # 600 KB
    conn.execute_command("AI.TENSORSET", "big", "FLOAT", big.size, "BLOB", big.tobytes())
    for _ in range(3):
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "big", "big", "OUTPUTS", 1, "c")
    info = conn.info("ai")
    assert info["ai_cache_entries"] >= 2 and info["ai_cache_used_bytes"] > big.nbytes  # metadata, input, output
    hits = info["ai_cache_hits"]
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "big", "big", "OUTPUTS", 1, "c")
    assert conn.info("ai")["ai_cache_hits"] >= hits + 2  # the metadata and the input, no read of either
    assert np.array_equal(np.frombuffer(conn.execute_command("AI.TENSORGET", "c", "BLOB"), np.float32), big * 2)


def test_a_big_input_we_wrote_run_stale_is_checked_by_its_stamp_and_run_again(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A big tensor this server wrote is kept as its header and data apart (never joined); with every
    invalidation lost, the run's write still compares its stamp with the store's (STALEINPUT) and the run is
    done again on the store's value, which AI.TENSORGET serves too."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    first, second = np.full(150_000, 1.0, np.float32), np.full(150_000, 3.0, np.float32)
    ours.execute_command("AI.TENSORSET", "{t}img", "FLOAT", first.size, "BLOB", first.tobytes())
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "{t}img", "OUTPUTS", 1, "{t}out")
    hits = ours.info("ai")["ai_cache_hits"]
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "{t}img", "OUTPUTS", 1, "{t}out")
    assert ours.info("ai")["ai_cache_hits"] >= hits + 2  # the metadata and the input: our copy was run
    _drop_pushes(server)
    theirs.execute_command("AI.TENSORSET", "{t}img", "FLOAT", second.size, "BLOB", second.tobytes())
    assert ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "{t}img", "OUTPUTS", 1, "{t}out") == b"OK"
    assert np.array_equal(np.frombuffer(ours.execute_command("AI.TENSORGET", "{t}out", "BLOB"), np.float32),
                          second * 2)
    assert _calls(ours, "m") == 3
    assert ours.execute_command("AI.TENSORGET", "{t}img", "BLOB") == second.tobytes()


def test_a_big_tensor_replaced_through_another_server_is_never_used_or_served_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    theirs.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    for round_ in range(4):
        value = np.full(150_000, float(round_), dtype=np.float32)
        writer = theirs if round_ % 2 else ours
        writer.execute_command("AI.TENSORSET", "{t}img", "FLOAT", value.size, "BLOB", value.tobytes())
        for reader in (ours, theirs):
            reader.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "{t}img", "OUTPUTS", 1, "{t}out")
            out = np.frombuffer(reader.execute_command("AI.TENSORGET", "{t}out", "BLOB"), np.float32)
            assert np.array_equal(out, value * 2)
            got = np.frombuffer(reader.execute_command("AI.TENSORGET", "{t}img", "BLOB"), np.float32)
            assert np.array_equal(got, value)


def test_a_store_flushed_under_a_cached_copy(shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    value = np.ones(150_000, dtype=np.float32)
    ours.execute_command("AI.TENSORSET", "img", "FLOAT", value.size, "BLOB", value.tobytes())
    ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "img", "OUTPUTS", 1, "out")
    assert ours.execute_command("AI.TENSORGET", "img", "BLOB") == value.tobytes()
    direct.flushall()
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        ours.execute_command("AI.TENSORGET", "img", "BLOB")
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "img", "OUTPUTS", 1, "out")
    assert direct.exists("out") == 0


def test_the_cache_holds_no_more_than_its_byte_budget(store_url: str) -> None:
    with running_server(Config(port=0, redis_url=store_url, cache_mb=4)) as server:
        conn = server.client()
        for i in range(12):
            value = np.full(150_000, float(i), dtype=np.float32)  # 600 KB each, 7.2 MB in all
            conn.execute_command("AI.TENSORSET", f"t{i}", "FLOAT", value.size, "BLOB", value.tobytes())
            info = conn.info("ai")
            assert 0 < info["ai_cache_used_bytes"] <= info["ai_cache_budget_bytes"] == 4 * 1024 * 1024
        for i in range(12):
            got = np.frombuffer(conn.execute_command("AI.TENSORGET", f"t{i}", "BLOB"), np.float32)
            assert got[0] == float(i) and got.size == 150_000
        assert conn.info("ai")["ai_cache_used_bytes"] <= 4 * 1024 * 1024


def test_writes_by_clients_of_the_store_itself_are_seen(shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    assert _values(ours, "t") == [1, 2]
    direct.set("t", _raw(direct, "t").replace(ONE_TWO, THREE_FOUR))
    assert _values(ours, "t") == [3, 4]
    direct.delete("t")
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _values(ours, "t")
    ours.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    assert _values(ours, "t") == [1, 2]
    direct.flushall()
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _values(ours, "t")


def test_relayed_writes_through_this_server_drop_what_they_change(server: RunningServer) -> None:
    conn = server.client()
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    assert _values(conn, "t") == [1, 2]
    conn.set("t", "not a tensor")
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
        _values(conn, "t")
    conn.delete("t")
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    assert _values(conn, "t") == [1, 2]
    conn.rename("t", "u")
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _values(conn, "t")
    assert _values(conn, "u") == [1, 2]
    pipe = conn.pipeline(transaction=True)
    pipe.delete("u")
    pipe.execute()
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _values(conn, "u")
    conn.execute_command("AI.TENSORSET", "v", "FLOAT", 2, "BLOB", ONE_TWO)
    assert _values(conn, "v") == [1, 2]
    conn.eval("redis.call('DEL', 'v')", 0)  # a key named only inside a script
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _values(conn, "v")


def test_keys_with_a_ttl_are_not_served_after_it(server: RunningServer) -> None:
    conn = server.client()
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    conn.pexpire("t", 100)
    assert _values(conn, "t") == [1, 2]
    time.sleep(0.3)
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        _values(conn, "t")


def test_a_lost_tracking_connection_drops_the_cache(shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, _theirs, direct = shared_store
    ours.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
    assert _values(ours, "t") == [1, 2]
    direct.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # every link of both servers
    direct.set("t", _raw(direct, "t").replace(ONE_TWO, THREE_FOUR))
    ours = redis.Redis(port=ours.connection_pool.connection_kwargs["port"])  # our client session was closed too
    assert _values(ours, "t") == [3, 4]


def test_the_cache_can_be_turned_off(store_url: str) -> None:
    with running_server(Config(port=0, redis_url=store_url, cache_mb=0)) as server:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
        for _ in range(3):
            assert _values(conn, "t") == [1, 2]
        info = conn.info("ai")
        assert (info["ai_cache_hits"], info["ai_cache_budget_bytes"]) == (0, 0)


def test_a_store_that_refuses_to_track_keys_means_no_cache_not_errors(embedded_only: RunningServer) -> None:
    store = embedded_only.server.ctx.store
    assert isinstance(store, EmbeddedStore)
    direct = redis.Redis(unix_socket_path=store.process.socket_path)
    direct.execute_command("ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-client")
    url = f"unix://limited:pw@{store.process.socket_path}"
    with running_server(Config(port=0, redis_url=url, shutdown_timeout=2.0)) as other:
        conn = other.client()
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
        conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "BLOB", ONE_TWO)
        for _ in range(3):
            assert conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "t", "t", "OUTPUTS", 1, "c") == b"OK"
            assert _values(conn, "c") == [2, 4]
        assert conn.info("ai")["ai_cache_budget_bytes"] == 0


@pytest.fixture
def embedded_only() -> Iterator[RunningServer]:
    with running_server(Config(port=0, shutdown_timeout=2.0)) as running:
        yield running
