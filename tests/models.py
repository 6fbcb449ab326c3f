"""Models the tests build themselves: TorchScript (torch.jit) and ONNX (onnx.helper), serialized to bytes."""

from __future__ import annotations

import io

import onnx
import torch
from onnx import TensorProto, helper


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


def onnx_add() -> bytes:
    """Two float inputs a, b of shape [2, 2] → their sum c."""
    node = helper.make_node("Add", ["a", "b"], ["c"])
    graph = helper.make_graph(
        [node], "add",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def onnx_string_identity() -> bytes:
    """A STRING input x of any length → the same strings as y (ONNX Identity)."""
    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph([node], "strings", [helper.make_tensor_value_info("x", TensorProto.STRING, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


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


def onnx_slow_chain(links: int = 24, size: int = 512) -> bytes:
    """``links`` chained MatMuls of a size x size input with a fixed weight: long enough to be stopped by
    MODEL_EXECUTION_TIMEOUT (onnxruntime checks its terminate flag between nodes)."""
    import numpy as np
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.full((size, size), 1.0 / size, dtype=np.float32), name="w")
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", "w"], [f"h{i + 1}"]) for i in range(links)]
    nodes.append(helper.make_node("Identity", [f"h{links}"], ["y"]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()
