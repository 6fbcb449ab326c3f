"""``GPU:n`` devices map to CUDA device n in every backend, checked without a GPU.

The mapping is pure (``cuda_ordinal``, ``onnx_providers``): given how many GPUs a backend sees, or which
providers onnxruntime offers, it says where a ``GPU:n`` model runs. On this CPU-only machine the real
backends then answer RedisAI's "couldn't find CUDA" for any GPU device, at load time.
"""

from __future__ import annotations

import pytest

from backends import errors as msgs
from backends.base import RuntimeOptions
from backends.device import cuda_ordinal, parse_device
from backends.errors import AIError
from backends.onnx_backend import OnnxBackend, onnx_providers
from backends.torch_backend import TorchBackend, torch_device
from tests import models

ORT_WITH_CUDA = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


@pytest.mark.parametrize(("text", "visible", "ordinal"), [
    ("GPU", 1, 0), ("GPU:", 1, 0), ("gpu:0", 1, 0), ("GPU:1", 2, 1), ("GPU:7", 8, 7),
])
def test_gpu_n_is_cuda_device_n(text: str, visible: int, ordinal: int) -> None:
    assert cuda_ordinal(parse_device(text.encode()), visible, msgs.TORCH_GPU_NOT_AVAILABLE_MSG) == ordinal


@pytest.mark.parametrize(("text", "visible"), [("GPU", 0), ("GPU:1", 1), ("GPU:2", 2)])
def test_a_gpu_beyond_those_seen_is_refused(text: str, visible: int) -> None:
    with pytest.raises(AIError, match=r"^GPU requested but Torch couldn't find CUDA$"):
        cuda_ordinal(parse_device(text.encode()), visible, msgs.TORCH_GPU_NOT_AVAILABLE_MSG)


def test_onnx_runs_gpu_n_on_cuda_device_n() -> None:
    assert onnx_providers(parse_device(b"GPU:1"), ORT_WITH_CUDA) == \
        [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"]
    assert onnx_providers(parse_device(b"GPU"), ORT_WITH_CUDA)[0] == ("CUDAExecutionProvider", {"device_id": 0})
    assert onnx_providers(parse_device(b"CPU:3"), ORT_WITH_CUDA) == ["CPUExecutionProvider"]
    with pytest.raises(AIError, match=r"^ERR GPU requested but ONNX couldn't find CUDA$"):
        onnx_providers(parse_device(b"GPU:0"), ["CPUExecutionProvider"])


def test_cpu_only_backends_refuse_gpu_devices_at_load() -> None:
    """The installed torch and onnxruntime are CPU builds: a GPU model fails to load with RedisAI's text."""
    options = RuntimeOptions()
    assert str(torch_device(parse_device(b"CPU:1"))) == "cpu"
    with pytest.raises(AIError, match=r"^GPU requested but Torch couldn't find CUDA$"):
        TorchBackend().load_model(models.torch_add(), parse_device(b"GPU:1"), options)
    with pytest.raises(AIError, match=r"^ERR GPU requested but ONNX couldn't find CUDA$"):
        OnnxBackend().load_model(models.onnx_add(), parse_device(b"GPU:1"), options)
