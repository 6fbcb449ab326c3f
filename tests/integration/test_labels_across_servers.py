"""A model stored through one server and run through another keeps its labels there: the second server's
``redisai_run_failures_total`` and ``run failed`` line name its type and device (they were empty: the labels came
only from a store made by the same process)."""

from __future__ import annotations

import logging
import urllib.request

import pytest
import redis

from server.config import Config
from tests.models import torch_add
from tests.support import free_port, running_server


def test_a_model_stored_through_another_server_carries_its_labels(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("prometheus_client")
    caplog.set_level(logging.INFO)
    with running_server(Config(port=0)) as first:
        socket_path = first.server.ctx.store.process.socket_path  # type: ignore[attr-defined]
        metrics_port = free_port()
        with running_server(Config(port=0, redis_url=f"unix://{socket_path}", metrics_port=metrics_port)) as second:
            first.client().execute_command("AI.MODELSTORE", "adder", "TORCH", "CPU", "BLOB", torch_add())
            client = second.client()
            client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
            client.execute_command("AI.TENSORSET", "b", "FLOAT", 3, "VALUES", 1, 2, 3)
            with pytest.raises(redis.ResponseError):  # shapes 2 and 3 do not add: the run fails
                client.execute_command("AI.MODELEXECUTE", "adder", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as reply:
                metrics = reply.read().decode()
    assert 'redisai_run_failures_total{device="CPU",key="adder",type="MODEL"} 1.0' in metrics, \
        [line for line in metrics.splitlines() if "failures" in line]
    failed = [record.fields for record in caplog.records if record.getMessage() == "run failed"]  # type: ignore[attr-defined]
    assert failed and failed[0]["type"] == "MODEL" and failed[0]["device"] == "CPU", failed
