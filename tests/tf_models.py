"""TF and TFLite models the tests build themselves (no downloads), and TensorFlow run in-process to check
what the server answers: a ``tf.compat.v1`` graph of placeholders frozen to a GraphDef, ``.tflite``
flatbuffers from ``tf.lite.TFLiteConverter`` over small ``tf.function``s, one of them quantized to int8."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

v1: Any = tf.compat.v1


def tf_version() -> str:
    return str(tf.__version__)


def _frozen(build: Callable[[], None]) -> bytes:
    """The GraphDef of a fresh graph built by ``build`` (placeholders and ops only: already frozen)."""
    graph = tf.Graph()
    with graph.as_default():
        build()
    return bytes(graph.as_graph_def().SerializeToString())


def tf_mul() -> bytes:
    """RedisAI's ``graph.pb``: ``mul = a * b`` on float placeholders ``a`` and ``b``."""
    def build() -> None:
        a = v1.placeholder(tf.float32, name="a")
        b = v1.placeholder(tf.float32, name="b")
        tf.multiply(a, b, name="mul")
    return _frozen(build)


def tf_dense(seed: int = 0) -> bytes:
    """A frozen 4 → 3 dense layer with a softmax: ``x`` [None, 4] → ``logits`` and ``probs``, weights as
    constants (what freezing a trained graph leaves)."""
    rng = np.random.default_rng(seed)
    weights, bias = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)

    def build() -> None:
        x = v1.placeholder(tf.float32, shape=[None, 4], name="x")
        logits = tf.add(tf.matmul(x, tf.constant(weights)), tf.constant(bias), name="logits")
        tf.nn.softmax(logits, name="probs")
    return _frozen(build)


def tf_int_and_string() -> bytes:
    """``n`` int32 → ``twice`` (n * 2); ``s`` string → ``echo`` (identity): dtypes other than float."""
    def build() -> None:
        n = v1.placeholder(tf.int32, name="n")
        tf.multiply(n, 2, name="twice")
        s = v1.placeholder(tf.string, name="s")
        tf.identity(s, name="echo")
    return _frozen(build)


def run_graph(blob: bytes, feeds: dict[str, np.ndarray], fetches: list[str]) -> list[np.ndarray]:
    """TensorFlow in-process on the same GraphDef: what the server must answer."""
    graph_def = v1.GraphDef()
    graph_def.ParseFromString(blob)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with v1.Session(graph=graph) as session:
        results = session.run([f"{name}:0" for name in fetches], {f"{k}:0": v for k, v in feeds.items()})
    return [np.asarray(r) for r in results]


def _convert(function: Any, *, quantize: Callable[[], Iterator[list[np.ndarray]]] | None = None) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()], function)
    if quantize is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = quantize
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the int8 converter's note that the inputs carry no statistics
        return bytes(converter.convert())


def tflite_add_mul() -> tuple[bytes, Callable[[np.ndarray, np.ndarray], list[np.ndarray]]]:
    """Inputs ``x`` and ``y`` float32 [None, 3] → two outputs, ``x + y`` and ``x * y``; and the very
    ``tf.function`` it was converted from, run by TensorFlow (the expected outputs)."""
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([None, 3], tf.float32, name="y")])
    def add_mul(x: Any, y: Any) -> Any:
        return x + y, x * y

    def reference(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(t) for t in add_mul(tf.constant(x), tf.constant(y))]
    return _convert(add_mul), reference


def tflite_quantized() -> bytes:
    """A fully int8 model (input and output int8): ``relu(x @ W + b)`` over x float [1, 4], quantized on
    a representative data set of 50 seeded samples."""
    rng = np.random.default_rng(1)
    weights = tf.constant(rng.standard_normal((4, 2)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def dense(x: Any) -> Any:
        return tf.nn.relu(tf.matmul(x, weights) + 0.5)

    def samples() -> Iterator[list[np.ndarray]]:
        for _ in range(50):
            yield [rng.uniform(-1, 1, (1, 4)).astype(np.float32)]
    return _convert(dense, quantize=samples)


def _tf_interpreter(blob: bytes) -> Any:
    """TensorFlow's own TFLite interpreter (deprecated in favour of LiteRT's, which the server uses)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tf.lite.Interpreter(model_content=blob)


def run_tflite(blob: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """TensorFlow's own TFLite interpreter in-process, resized to the inputs' shapes as the server does."""
    interpreter = _tf_interpreter(blob)
    for detail, array in zip(interpreter.get_input_details(), inputs, strict=True):
        interpreter.resize_tensor_input(detail["index"], list(array.shape), strict=False)
    interpreter.allocate_tensors()
    for detail, array in zip(interpreter.get_input_details(), inputs, strict=True):
        interpreter.set_tensor(detail["index"], array)
    interpreter.invoke()
    return [np.asarray(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()]


def tflite_names(blob: bytes) -> tuple[list[str], list[str]]:
    """The input and output names stored in the flatbuffer, as TFLite reads them."""
    interpreter = _tf_interpreter(blob)
    return ([str(d["name"]) for d in interpreter.get_input_details()],
            [str(d["name"]) for d in interpreter.get_output_details()])
