"""A COMPILED graph run takes its inputs from the coherent cache, as a model run does, and its output write
checks each one it took (STALEINPUT): a changed input is never run stale, whoever changed it."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from tests.integration.test_cache import _calls, _drop_pushes
from tests.models import torch_double
from tests.support import RunningServer

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)
RUN = ("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "in", "OUTPUTS", 1, "out")


def _doubling_graph(conn: redis.Redis) -> None:
    conn.execute_command("AI.MODELSTORE", "dbl", "TORCH", "CPU", "BLOB", torch_double())
    conn.execute_command("AI.GRAPHSTORE", "g", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                         "|>", "AI.MODELEXECUTE", "dbl", "INPUTS", 1, "x", "OUTPUTS", 1, "t",
                         "|>", "AI.MODELEXECUTE", "dbl", "INPUTS", 1, "t", "OUTPUTS", 1, "y")


def _out(conn: redis.Redis) -> list[float]:
    return np.frombuffer(conn.execute_command("AI.TENSORGET", "out", "BLOB"), np.float32).tolist()


def test_an_input_written_through_another_server_is_never_run_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, theirs, _direct = shared_store
    _doubling_graph(ours)
    for i in range(40):
        theirs.execute_command("AI.TENSORSET", "in", "FLOAT", 2, "VALUES", i, -i)
        for _ in range(2):  # the second run may take its input from the cache: still the same value
            assert ours.execute_command(*RUN) == b"OK"
            assert _out(ours) == [4.0 * i, -4.0 * i]


def test_a_run_on_a_stale_cached_input_is_never_written_but_run_again(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """Every invalidation lost: the write compares the cached input with the store's (STALEINPUT) and the run
    is done again on the store's value, counted once in AI.INFO; a deleted input answers the store's error and
    writes nothing."""
    ours, theirs, direct = shared_store
    _doubling_graph(ours)
    ours.execute_command("AI.TENSORSET", "in", "FLOAT", 2, "VALUES", 1, 2)
    for _ in range(2):  # the second run takes "in" from the cache
        ours.execute_command(*RUN)
    _drop_pushes(server)
    theirs.execute_command("AI.TENSORSET", "in", "FLOAT", 2, "VALUES", 3, 4)
    assert ours.execute_command(*RUN) == b"OK"
    assert _out(ours) == [12.0, 16.0]
    assert _calls(ours, "g") == 3
    direct.delete("in")
    with pytest.raises(redis.ResponseError, match="tensor key is empty"):
        ours.execute_command(*RUN)
    assert _out(ours) == [12.0, 16.0]  # nothing written


@pytest.mark.single_node  # counts the store's own commands (one node's INFO)
def test_a_big_input_we_wrote_run_stale_is_checked_by_its_stamp(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis], server: RunningServer) -> None:
    """A big input this server wrote (kept as its header and data apart) is run from the cache, and compared
    by its stamp."""
    ours, theirs, direct = shared_store
    _doubling_graph(ours)
    first, second = np.full(20_000, 1.0, np.float32), np.full(20_000, 3.0, np.float32)
    ours.execute_command("AI.TENSORSET", "in", "FLOAT", first.size, "BLOB", first.tobytes())
    ours.execute_command(*RUN)
    gets_before = _gets(direct)
    ours.execute_command(*RUN)
    assert _gets(direct) == gets_before  # "in" from our copy, not read
    assert _out(ours) == (first * 4).tolist()
    _drop_pushes(server)
    theirs.execute_command("AI.TENSORSET", "in", "FLOAT", second.size, "BLOB", second.tobytes())
    assert ours.execute_command(*RUN) == b"OK"
    assert _out(ours) == (second * 4).tolist()


@pytest.mark.single_node  # counts the store's own commands (one node's INFO)
def test_repeated_compiled_runs_do_not_read_their_input_again(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, _theirs, direct = shared_store
    _doubling_graph(ours)
    ours.execute_command("AI.TENSORSET", "in", "FLOAT", 2, "VALUES", 1, 2)
    ours.execute_command(*RUN)  # the output key is now ours, the metadata and input cached
    gets_before = _gets(direct)
    for _ in range(20):
        assert ours.execute_command(*RUN) == b"OK"
    assert _gets(direct) == gets_before
    assert _out(ours) == [4.0, 8.0]
    gets_before = _gets(direct)
    ours.execute_command(*RUN, "MODE", "INTERPRETED")  # the DAG engine reads its inputs from the store
    assert _gets(direct) > gets_before


def _gets(direct: redis.Redis) -> int:
    """The GET commands the store has served."""
    return int(direct.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
