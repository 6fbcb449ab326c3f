"""Auto-batching across clients and inside DAGs, with real TorchScript models."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from tests import models
from tests.support import RunningServer, wait_until

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)


def _store(conn: redis.Redis, key: str, blob: bytes, *batching: object) -> None:
    conn.execute_command("AI.MODELSTORE", key, "TORCH", "CPU", *batching, "BLOB", blob)


def _concurrently(count: int, work: object) -> list[object]:
    results: list[object] = [None] * count

    def run(index: int) -> None:
        try:
            results[index] = work(index)  # type: ignore[operator]
        except redis.ResponseError as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_eight_clients_one_batch(server: RunningServer) -> None:
    setup = server.client()
    # a timeout far beyond the clients' socket timeout: only a batch that filled up can answer them
    _store(setup, "m", models.torch_double(), "BATCHSIZE", 8, "MINBATCHSIZE", 8, "MINBATCHTIMEOUT", 600000)
    queue_before = server.server.ctx.ai.queues.queue("CPU").batched_requests

    def one(index: int) -> list[bytes]:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", f"in{index}", "FLOAT", 1, 2, "VALUES", index, index + 1)
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, f"in{index}", "OUTPUTS", 1, f"out{index}")
        return list(conn.execute_command("AI.TENSORGET", f"out{index}", "VALUES"))

    results = _concurrently(8, one)
    assert results == [[str(2 * i).encode(), str(2 * i + 2).encode()] for i in range(8)]
    assert server.server.ctx.ai.queues.queue("CPU").batched_requests - queue_before == 8
    info = setup.execute_command("AI.INFO", "m")
    assert info[13:] == [8, b"calls", 8, b"errors", 0]  # samples, calls, errors: every request counted
    queue_line = setup.info("ai")["ai_queue_CPU"]
    assert queue_line["batched_requests"] >= 8 and queue_line["executed"] < 8  # 8 requests, fewer model calls


def test_lone_request_runs_after_minbatchtimeout(client: redis.Redis) -> None:
    _store(client, "m", models.torch_double(), "BATCHSIZE", 4, "MINBATCHSIZE", 4, "MINBATCHTIMEOUT", 200)
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 2, "VALUES", 1, 2)
    started = time.perf_counter()
    assert client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "x", "OUTPUTS", 1, "y") == b"OK"
    assert time.perf_counter() - started >= 0.19  # it waited for MINBATCHTIMEOUT (a timer never fires early)
    assert client.execute_command("AI.TENSORGET", "y", "VALUES") == [b"2", b"4"]


def test_waiting_batch_does_not_block_other_models(client: redis.Redis) -> None:
    # the batched request waits (MINBATCHSIZE 4, a 10-minute MINBATCHTIMEOUT) until three more fill its batch
    _store(client, "batched", models.torch_double(), "BATCHSIZE", 4, "MINBATCHSIZE", 4, "MINBATCHTIMEOUT", 600000)
    _store(client, "plain", models.torch_double())
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 2, "VALUES", 1, 2)
    port = client.connection_pool.connection_kwargs["port"]
    run_batched = ("AI.MODELEXECUTE", "batched", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
    waiting = threading.Thread(target=lambda: redis.Redis(port=port).execute_command(*run_batched))
    waiting.start()
    assert wait_until(lambda: client.info("ai")["ai_queue_CPU"]["length"] >= 1)  # it is queued, waiting
    assert client.execute_command("AI.MODELEXECUTE", "plain", "INPUTS", 1, "x", "OUTPUTS", 1, "z") == b"OK"
    assert waiting.is_alive()  # the other model ran while the batch still waited
    _concurrently(3, lambda _i: redis.Redis(port=port).execute_command(*run_batched))
    waiting.join(10)
    assert not waiting.is_alive()


def test_request_timeout_while_waiting_for_partners(client: redis.Redis) -> None:
    _store(client, "m", models.torch_double(), "BATCHSIZE", 2, "MINBATCHSIZE", 2)
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 2, "VALUES", 1, 2)
    reply = client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "x", "OUTPUTS", 1, "y", "TIMEOUT", 100)
    assert reply == b"TIMEDOUT"
    reply = client.execute_command("AI.DAGEXECUTE", "LOAD", 1, "x", "TIMEOUT", 100,
                                   "|>", "AI.MODELEXECUTE", "m", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                                   "|>", "AI.MODELEXECUTE", "m", "INPUTS", 1, "y", "OUTPUTS", 1, "z")
    assert reply == b"TIMEDOUT"


def test_dag_with_two_ops_on_one_batched_model(client: redis.Redis) -> None:
    _store(client, "m", models.torch_double(), "BATCHSIZE", 4, "MINBATCHSIZE", 2, "MINBATCHTIMEOUT", 100)
    reply = client.execute_command("AI.DAGEXECUTE", "ROUTING", "r",
                                   "|>", "AI.TENSORSET", "x", "FLOAT", 1, 2, "VALUES", 1, 2,
                                   "|>", "AI.MODELEXECUTE", "m", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                                   "|>", "AI.MODELEXECUTE", "m", "INPUTS", 1, "y", "OUTPUTS", 1, "z",
                                   "|>", "AI.TENSORGET", "z", "VALUES")
    assert reply == [b"OK", b"OK", b"OK", [b"4", b"8"]]


def test_wrong_batch_dimension_fails_every_member(server: RunningServer) -> None:
    setup = server.client()
    _store(setup, "bad", models.torch_sum_rows(), "BATCHSIZE", 4, "MINBATCHSIZE", 2, "MINBATCHTIMEOUT", 3000)

    def one(index: int) -> object:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", f"in{index}", "FLOAT", 1, 2, "VALUES", 1, 2)
        return conn.execute_command("AI.MODELEXECUTE", "bad", "INPUTS", 1, f"in{index}", "OUTPUTS", 1, f"o{index}")

    results = _concurrently(2, one)
    assert all(isinstance(r, redis.ResponseError) and "Model did not generate the expected batch size" in str(r)
               for r in results), results
    alone = server.client()
    _store(alone, "bad1", models.torch_sum_rows(), "BATCHSIZE", 4)
    alone.execute_command("AI.TENSORSET", "x", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
    assert alone.execute_command("AI.MODELEXECUTE", "bad1", "INPUTS", 1, "x", "OUTPUTS", 1, "y") == b"OK"


def test_mixed_shapes_never_mix(server: RunningServer) -> None:
    setup = server.client()
    _store(setup, "m", models.torch_double(), "BATCHSIZE", 8, "MINBATCHSIZE", 4, "MINBATCHTIMEOUT", 300)

    def one(index: int) -> list[bytes]:
        conn = server.client()
        width = 2 if index % 2 else 3
        conn.execute_command("AI.TENSORSET", f"in{index}", "FLOAT", 1, width, "VALUES", *range(width))
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, f"in{index}", "OUTPUTS", 1, f"out{index}")
        return list(conn.execute_command("AI.TENSORGET", f"out{index}", "VALUES"))

    results = _concurrently(4, one)
    for index, values in enumerate(results):
        width = 2 if index % 2 else 3
        assert values == [str(2 * v).encode() for v in range(width)]


@pytest.mark.parametrize("dtype", ["INT32"])
def test_dtype_mismatch_is_told_apart(server: RunningServer, dtype: str) -> None:
    """A request of another dtype is not merged into a FLOAT batch: both requests succeed on their own."""
    setup = server.client()
    _store(setup, "m", models.torch_double(), "BATCHSIZE", 4, "MINBATCHSIZE", 2, "MINBATCHTIMEOUT", 200)

    def one(index: int) -> object:
        conn = server.client()
        kind = "FLOAT" if index == 0 else dtype
        conn.execute_command("AI.TENSORSET", f"in{index}", kind, 1, 2, "VALUES", 1, 2)
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, f"in{index}", "OUTPUTS", 1, f"out{index}")
        return conn.execute_command("AI.TENSORGET", f"out{index}", "META")

    results = _concurrently(2, one)
    assert results == [[b"dtype", b"FLOAT", b"shape", [1, 2]], [b"dtype", dtype.encode(), b"shape", [1, 2]]]
