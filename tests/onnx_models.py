"""ONNX models the tests build with onnx.helper alone, serialized to bytes: importable without torch.

The torch-free test run (`make test-python PY=python3.12`: every Python in the declared range, no torch there)
uses them; tests/models.py re-exports them beside the TorchScript models.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


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


def onnx_slow_chain(links: int = 24, size: int = 512) -> bytes:
    """``links`` chained MatMuls of a size x size input with a fixed weight: long enough to be stopped by
    MODEL_EXECUTION_TIMEOUT (onnxruntime checks its terminate flag between nodes)."""
    weight = numpy_helper.from_array(np.full((size, size), 1.0 / size, dtype=np.float32), name="w")
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", "w"], [f"h{i + 1}"]) for i in range(links)]
    nodes.append(helper.make_node("Identity", [f"h{links}"], ["y"]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()
