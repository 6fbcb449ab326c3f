"""A model that writes into its input in place never changes the stored tensor, nor this server's copy of it;
one that never writes in place runs on the stored bytes as they are."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import torch

from tests.support import RunningServer


class _AddsOneInPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2


class _Doubles(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _blob(module: torch.nn.Module) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def _run_three_times(server: RunningServer, model: torch.nn.Module, answer: Callable[[np.ndarray], np.ndarray]) -> None:
    conn = server.client()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", _blob(model))
    value = np.arange(150_000, dtype=np.float32)  # 600 KB: kept as this server's stamped copy
    conn.execute_command("AI.TENSORSET", "img", "FLOAT", value.size, "BLOB", value.tobytes())
    for _ in range(3):
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "img", "OUTPUTS", 1, "out")
        out = np.frombuffer(conn.execute_command("AI.TENSORGET", "out", "BLOB"), np.float32)
        assert np.array_equal(out, answer(value))
        stored = np.frombuffer(conn.execute_command("AI.TENSORGET", "img", "BLOB"), np.float32)
        assert np.array_equal(stored, value)


def test_a_model_writing_into_its_input_never_changes_the_stored_tensor(server: RunningServer) -> None:
    _run_three_times(server, _AddsOneInPlace(), lambda x: (x + 1) * 2)  # from the same x every time


def test_a_model_that_only_reads_its_input_answers_from_the_stored_bytes(server: RunningServer) -> None:
    _run_three_times(server, _Doubles(), lambda x: x * 2)
