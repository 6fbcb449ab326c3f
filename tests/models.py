"""Models the tests build themselves: TorchScript (torch.jit) and ONNX (onnx.helper), serialized to bytes.

The ONNX models built without torch live in tests/onnx_models.py (importable where torch is not installed:
the torch-free test run on every Python, `make test-python`); they are re-exported here.
"""

from __future__ import annotations

import io

import torch

from tests.onnx_models import onnx_add as onnx_add
from tests.onnx_models import onnx_slow_chain as onnx_slow_chain
from tests.onnx_models import onnx_string_identity as onnx_string_identity


def _save(module: torch.jit.ScriptModule) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


class _Add(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class _Mul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b


class _SumAndDiff(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class _Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class _MatMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


class _Slow(torch.nn.Module):
    """Enough matrix products to take a noticeable time; torch releases the GIL while it computes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for _ in range(150):
            y = torch.tanh(torch.matmul(y, y) / 512.0)
        return y


def torch_add() -> bytes:
    return _save(torch.jit.script(_Add()))


def torch_mul() -> bytes:
    return _save(torch.jit.script(_Mul()))


def torch_sum_and_diff() -> bytes:
    return _save(torch.jit.script(_SumAndDiff()))


def torch_double() -> bytes:
    return _save(torch.jit.script(_Double()))


def torch_matmul() -> bytes:
    return _save(torch.jit.script(_MatMul()))


def torch_slow() -> bytes:
    return _save(torch.jit.script(_Slow()))


def torch_mlp(seed: int = 0) -> bytes:
    """64 → 128 → 10, traced: the benchmark model."""
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    return _save(torch.jit.trace(mlp, torch.zeros(1, 64)))


def onnx_mlp(seed: int = 0) -> bytes:
    """The same 64 → 128 → 10 MLP, exported through torch.onnx with a dynamic batch dimension."""
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    buffer = io.BytesIO()
    torch.onnx.export(mlp, (torch.zeros(1, 64),), buffer,  # type: ignore[arg-type]  # a file object works
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    return buffer.getvalue()


class _SumRows(torch.nn.Module):
    """Always one row out, whatever the batch: a model whose batch dimension is wrong when batched."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0, keepdim=True)


def torch_sum_rows() -> bytes:
    return _save(torch.jit.script(_SumRows()))


def torch_wide_mlp(seed: int = 0) -> bytes:
    """1024 → 2048 → 2048 → 10 (24 MB of weights): at batch 1 each call streams every weight from memory,
    so one call of 32 rows costs little more than one row — the case auto-batching is for."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                              torch.nn.ReLU(), torch.nn.Linear(2048, 10)).eval()
    return _save(torch.jit.trace(net, torch.zeros(1, 1024)))
