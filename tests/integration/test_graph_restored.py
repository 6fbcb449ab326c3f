"""A stored graph stored again through another server, back and forth, is never run as the version before."""

from __future__ import annotations

import numpy as np
import redis

from tests.models import torch_double


def _store(conn: redis.Redis, doublings: int) -> None:
    names = ["x", *(f"t{i}" for i in range(1, doublings)), "y"]
    ops = [part for i in range(doublings)
           for part in ("|>", "AI.MODELEXECUTE", "dbl", "INPUTS", 1, names[i], "OUTPUTS", 1, names[i + 1])]
    conn.execute_command("AI.GRAPHSTORE", "g", "INPUTS", 1, "x", "OUTPUTS", 1, "y", *ops)


def test_a_graph_stored_again_through_another_server_is_never_run_stale(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "dbl", "TORCH", "CPU", "BLOB", torch_double())
    ours.execute_command("AI.TENSORSET", "in", "FLOAT", 2, "VALUES", 1, 2)
    for doublings in (1, 2, 1, 2, 3, 1, 3, 2):  # the same contents again: the same digests come back
        _store(theirs, doublings)
        for mode in ((), ("MODE", "INTERPRETED")):
            ours.execute_command("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "in", "OUTPUTS", 1, "out", *mode)
            out = np.frombuffer(ours.execute_command("AI.TENSORGET", "out", "BLOB"), np.float32)
            assert out.tolist() == [2.0 ** doublings, 2.0 ** (doublings + 1)]


def test_graphget_and_an_interpreted_run_see_a_graph_stored_again_elsewhere_at_once(
        shared_store: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    """Neither has a digest check behind it: they never take the graph's head from this server's cache."""
    ours, theirs, _direct = shared_store
    ours.execute_command("AI.MODELSTORE", "dbl", "TORCH", "CPU", "BLOB", torch_double())
    ours.execute_command("AI.TENSORSET", "in", "FLOAT", 2, "VALUES", 1, 2)
    _store(theirs, 1)
    for doublings in (2, 3, 1):
        ours.execute_command("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "in", "OUTPUTS", 1, "out")  # caches the head
        _store(theirs, doublings)
        meta = ours.execute_command("AI.GRAPHGET", "g", "SOURCE")
        assert sum(part == b"AI.MODELEXECUTE" for part in meta) == doublings
        ours.execute_command("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "in", "OUTPUTS", 1, "out", "MODE", "INTERPRETED")
        out = np.frombuffer(ours.execute_command("AI.TENSORGET", "out", "BLOB"), np.float32)
        assert out.tolist() == [2.0 ** doublings, 2.0 ** (doublings + 1)]
