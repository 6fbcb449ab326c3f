"""A refused AI.MODELSTORE, AI.SCRIPTSTORE or AI.GRAPHSTORE is logged at notice with its key and the reason
(server/commands/store_log.py); before, only a stored one was."""

from __future__ import annotations

import logging

import pytest
import redis

from server.config import Config
from tests.support import running_server


def _failures(caplog: pytest.LogCaptureFixture) -> dict[str, dict[str, str]]:
    return {record.getMessage(): record.fields for record in caplog.records  # type: ignore[attr-defined]
            if record.name == "redisai.commands" and record.getMessage().endswith("store failed")
            and record.levelno == logging.INFO}


def test_a_refused_store_is_logged_with_its_key_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="redisai.commands")
    with running_server(Config(port=0)) as server:
        client = server.client()
        with pytest.raises(redis.ResponseError) as model_error:
            client.execute_command("AI.MODELSTORE", "broken-model", "TORCH", "CPU", "BLOB", b"not a model")
        with pytest.raises(redis.ResponseError) as script_error:
            client.execute_command("AI.SCRIPTSTORE", "broken-script", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE",
                                   "def f(:\n")
        with pytest.raises(redis.ResponseError) as graph_error:
            client.execute_command("AI.GRAPHSTORE", "broken-graph", "INPUTS", 1)
    failures = _failures(caplog)
    model = failures["model store failed"]
    assert model["key"] == "broken-model" and model["backend"] == "TORCH" and model["device"] == "CPU"
    assert model["error"] == str(model_error.value) or str(model_error.value) in model["error"]
    assert failures["script store failed"]["key"] == "broken-script"
    assert str(script_error.value) in failures["script store failed"]["error"]
    assert failures["graph store failed"]["key"] == "broken-graph"
    assert str(graph_error.value) in failures["graph store failed"]["error"]
