"""Devices: ``CPU``, ``CPU:n``, ``GPU``, ``GPU:n`` — parsed once, normalised for queue names; and the tensors an
op leaves on its device (``ResidentTensor``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import Tensor


@dataclass(frozen=True, slots=True)
class Device:
    """A device as the client typed it (``text``), plus what it means.

    ``queue_name`` is the upper-cased string: ``cpu`` and ``CPU`` share a queue, ``CPU:1`` is another one.
    """

    text: str
    kind: str  # "CPU" or "GPU"
    index: int | None

    @property
    def queue_name(self) -> str:
        return self.text.upper()

    @property
    def is_gpu(self) -> bool:
        return self.kind == "GPU"


def parse_device(raw: bytes) -> Device:
    """MODELSTORE's strict rule: CPU | GPU | CPU:<digits> | GPU:<digits>, under 10 characters.

    Quirk kept from RedisAI 1.2.7: ``CPU:`` and ``GPU:`` with no digits are accepted.
    """
    text = raw.decode(errors="replace")
    upper = text.upper()
    if len(text) >= 10 or upper[:3] not in ("CPU", "GPU"):
        raise AIError(msgs.INVALID_DEVICE_MSG)
    rest = upper[3:]
    if rest == "":
        return Device(text, upper[:3], None)
    if not rest.startswith(":") or not (rest[1:] == "" or (rest[1:].isdigit() and rest[1:].isascii())):
        raise AIError(msgs.INVALID_DEVICE_MSG)
    return Device(text, upper[:3], int(rest[1:]) if rest[1:] else None)


def parse_device_lenient(raw: bytes) -> Device:
    """The looser rule of SCRIPTSTORE and the deprecated MODELSET: any ``CPU…``/``GPU…`` prefix is taken."""
    text = raw.decode(errors="replace")
    upper = text.upper()
    kind = upper[:3] if upper[:3] in ("CPU", "GPU") else "CPU"
    suffix = upper[4:] if upper[3:4] == ":" else ""
    index = int(suffix) if suffix.isascii() and suffix.isdigit() and len(suffix) <= 9 else None
    return Device(text, kind, index)


def cuda_ordinal(device: Device, visible: int, missing_msg: str) -> int:
    """The CUDA device number a GPU device runs on: ``GPU``, ``GPU:`` and ``GPU:0`` are 0, ``GPU:n`` is n.

    ``visible`` is how many CUDA devices the backend sees (0 without CUDA); a device beyond them is
    ``missing_msg`` (RedisAI's "GPU requested but <backend> couldn't find CUDA") rather than a backend crash
    at load time, and never silently another GPU.
    """
    ordinal = device.index or 0
    if ordinal >= visible:
        raise AIError(missing_msg)
    return ordinal


class ResidentTensor:
    """A model's output left on its device (a GPU) between the ops of one run, instead of copied to the host.

    Why: a DAG or stored graph whose ops run on one GPU would otherwise copy every intermediate tensor to the
    host and back. It carries what batching and the DAG engine read of a tensor (``dtype``, a ``DTYPES`` name,
    and ``shape``) and crosses to the host only through ``host()``: when an op on another device, or a reply or
    PERSIST, needs it (dag/residency.py). ``value`` is the backend's own object; ``to_host`` turns it into a
    host ``Tensor``. Usage::

        kept = ResidentTensor("GPU:0", "FLOAT", (1, 10), on_gpu, to_host)
        tensor = kept.host()   # a backends.tensor.Tensor, copied once
    """

    __slots__ = ("device", "dtype", "shape", "to_host", "value")

    def __init__(self, device: str, dtype: str, shape: tuple[int, ...], value: object,
                 to_host: Callable[[object], Tensor]) -> None:
        self.device: Final = device  # the queue name of the device it lives on (``GPU:0``)
        self.dtype: Final = dtype
        self.shape: Final = shape
        self.value: Final = value
        self.to_host: Final = to_host

    def __repr__(self) -> str:
        return f"ResidentTensor({self.device}, {self.dtype}, {self.shape})"

    def host(self) -> Tensor:
        """The tensor on the host (a copy from the device; blocks until the copy is done)."""
        return self.to_host(self.value)
