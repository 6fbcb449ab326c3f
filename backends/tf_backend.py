"""TF models: a frozen GraphDef (``.pb``) imported with ``tf.compat.v1`` into its own graph, run by one
session per (model, device).

RedisAI's TF backend is TF 1's C API: the model is a graph, fed by the Placeholder ops named in INPUTS and
fetched at output 0 of the ops named in OUTPUTS. ``Session.run`` is thread-safe, so device workers share
the session. tensorflow is imported only when this module is, i.e. when a TF model is first stored or
``AI.CONFIG LOADBACKEND TF`` asks for it (backends/registry.py); importing it takes seconds.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from backends import errors as msgs
from backends.base import NO_NAMES, GraphNames, NamedModel, RuntimeOptions
from backends.device import Device
from backends.errors import AIError, one_line

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before the import: TF logs its CPU features to stderr
import tensorflow as tf  # no type stubs: what TF hands back is Any, kept inside this module

_v1: Any = tf.compat.v1

# What tf.compat.v1.Session adds to a failed run's status message (where the failing nodes were defined).
_PYTHON_CONTEXT = re.compile(r"\AGraph execution error:\s*(?:Detected at node .*?\nNode: '[^'\n]*'\n)*", re.DOTALL)

# TF's own DataTypeString() names where they differ from the numpy-style names of the Python DType.
_TF_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half"}


def tf_type_name(dtype: Any) -> str:
    """The name TF's C++ core gives a dtype in its messages (``float``, ``int32``, ``string``...)."""
    name = str(tf.as_dtype(dtype).name)
    return _TF_TYPE_NAMES.get(name, name)


def parse_graph_def(blob: bytes) -> Any:
    """The GraphDef in ``blob``; ``Invalid GraphDef`` (TF's C API text) when it is not one."""
    graph_def = _v1.GraphDef()
    try:
        graph_def.ParseFromString(blob)
    except Exception as exc:  # protobuf's DecodeError, or a RuntimeWarning-as-error on a huge length
        raise AIError(msgs.TF_INVALID_GRAPHDEF_MSG) from exc
    return graph_def


def import_graph(graph_def: Any, device: str) -> Any:
    """A new graph holding ``graph_def``, its ops placed on ``device`` (``/device:CPU:0``...)."""
    graph = tf.Graph()
    try:
        with graph.as_default(), tf.device(device):
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception as exc:  # an unknown op, a bad attribute, a dangling input...
        raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=one_line(exc))) from exc
    return graph


def _operation(graph: Any, name: str) -> Any:
    try:
        return graph.get_operation_by_name(name)
    except (KeyError, ValueError):  # missing, or a name like "a:0" that is not an op name
        return None


def check_names(graph: Any, names: GraphNames) -> None:
    """RedisAI's checks: every input is a Placeholder op, every output an op of the graph."""
    for name in names.inputs:
        op = _operation(graph, name)
        if op is None or op.type != "Placeholder":
            raise AIError(msgs.TF_INPUT_NODE_NOT_FOUND_FMT.format(name=name))
    for name in names.outputs:
        op = _operation(graph, name)
        if op is None or not op.outputs:  # an op without outputs (a NoOp) has nothing to fetch
            raise AIError(msgs.TF_OUTPUT_NODE_NOT_FOUND_FMT.format(name=name))


def tf_device(device: Device) -> str:
    """``/device:CPU:0``, or ``/device:GPU:n`` when TF sees that GPU (else RedisAI's CUDA error)."""
    if not device.is_gpu:
        return "/device:CPU:0"
    index = device.index or 0
    if len(tf.config.list_physical_devices("GPU")) <= index:
        raise AIError(msgs.TF_GPU_NOT_AVAILABLE_MSG)
    return f"/device:GPU:{index}"


class TfModel(NamedModel):
    """A frozen graph in its session; fed and fetched by the names given at store time."""

    def __init__(self, session: Any, graph: Any, names: GraphNames) -> None:
        super().__init__(list(names.inputs), list(names.outputs))
        self._session = session
        self._feeds = [graph.get_tensor_by_name(f"{name}:0") for name in names.inputs]
        self._fetches = [graph.get_tensor_by_name(f"{name}:0") for name in names.outputs]
        self._expected = [np.dtype(t.dtype.as_numpy_dtype) for t in self._feeds]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self._check_types(inputs)
        feed = dict(zip(self._feeds, inputs, strict=True))
        try:
            results = self._session.run(self._fetches, feed)
        except Exception as exc:
            raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=_tf_message(exc))) from exc
        return [np.asarray(r) for r in results]

    def _check_types(self, inputs: list[np.ndarray]) -> None:
        """The C API refuses a tensor of another dtype; the Python session would silently cast it."""
        for index, (array, expected) in enumerate(zip(inputs, self._expected, strict=True)):
            if array.dtype != expected:
                raise AIError(msgs.TF_INPUT_TYPE_FMT.format(
                    index=index, expected=tf_type_name(expected), given=_given_type_name(array.dtype)))


def _given_type_name(dtype: np.dtype[Any]) -> str:
    return "string" if dtype.kind in "OSU" else tf_type_name(dtype)


def _tf_message(exc: BaseException) -> str:
    """TF's status message as the C API gives it (RedisAI's text): ``OpError.message`` without the
    ``Graph execution error: Detected at node ...`` lines the Python session puts before it."""
    message = getattr(exc, "message", None)
    if not isinstance(message, str) or not message:
        return one_line(exc)
    return _PYTHON_CONTEXT.sub("", message, count=1) or message


class TfBackend:
    """The TF backend (tensorflow-cpu 2.x through ``tf.compat.v1``)."""

    name = "TF"

    def load_model(self, blob: bytes, device: Device, options: RuntimeOptions,
                   names: GraphNames = NO_NAMES) -> TfModel:
        placement = tf_device(device)
        graph = import_graph(parse_graph_def(blob), placement)
        check_names(graph, names)
        config = _v1.ConfigProto(intra_op_parallelism_threads=options.intra_op_threads,
                                 inter_op_parallelism_threads=options.inter_op_threads,
                                 allow_soft_placement=True)
        try:
            return TfModel(_v1.Session(graph=graph, config=config), graph, names)
        except Exception as exc:  # a session TF cannot make, a placeholder of a type no numpy array has
            raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=_tf_message(exc))) from exc

    def version(self) -> str:
        return str(tf.__version__)
