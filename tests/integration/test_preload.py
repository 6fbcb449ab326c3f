"""Warm start (server/ops/preload.py): ``--preload PATTERN`` loads the matching stored models and scripts at start,
before /readyz says ready; ``AI.CONFIG PRELOAD pattern`` loads more now and says how many."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

import pytest

from server.config import Config
from server.ops.preload import Preload, matches
from tests.models import torch_add, torch_double, torch_mul
from tests.support import free_port, running_server, wait_until

SCRIPT = "def double(tensors: List[Tensor], keys: List[str], args: List[str]):\n    return tensors[0] * 2\n"


def _loaded(caplog: pytest.LogCaptureFixture) -> set[bytes]:
    return {record.fields["key"] for record in caplog.records  # type: ignore[attr-defined]
            if record.getMessage() in ("model loaded", "script loaded")}


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_preload_loads_the_matching_objects_before_ready_and_ai_config_loads_more(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with running_server(Config(port=0)) as first:
        setup = first.client()
        for key, blob in (("warm-a", torch_add()), ("warm-b", torch_mul()), ("cold", torch_double())):
            setup.execute_command("AI.MODELSTORE", key, "TORCH", "CPU", "BLOB", blob)  # distinct: one load each
        setup.execute_command("AI.SCRIPTSTORE", "warm-s", "CPU", "ENTRY_POINTS", 1, "double", "SOURCE", SCRIPT)
        socket_path = first.server.ctx.store.process.socket_path  # type: ignore[attr-defined]
        caplog.clear()
        metrics_port = free_port()
        config = Config(port=0, redis_url=f"unix://{socket_path}", preload="warm*", metrics_port=metrics_port)
        with running_server(config) as second:
            progress = second.server.health.preload
            assert progress is not None and wait_until(lambda: progress.done, 120)
            assert _loaded(caplog) == {b"warm-a", b"warm-b", b"warm-s"}
            assert (progress.loaded, progress.total, progress.failed) == (3, 3, {})
            assert _readyz(metrics_port)[0] == 200
            reply = second.client().execute_command("AI.CONFIG", "PRELOAD", "c*")
            assert reply == [b"loaded", 1, b"failed", []]
            assert b"cold" in _loaded(caplog)


def test_readiness_names_what_is_still_loading() -> None:
    progress = Preload("m*", total=7, loaded=1, waiting=[b"m%d" % i for i in range(2, 8)])
    assert progress.reason() == "preloading: 1 of 7 loaded, waiting for m2, m3, m4, m5, m6 and 1 more"
    progress.done = True
    assert progress.reason() == ""
    assert matches("warm*", b"warm-a") and not matches("warm*", b"cold") and matches("m[0-9]", b"m7")
