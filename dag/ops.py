"""DAG ops: one small immutable class per op kind (no struct with per-kind optional fields).

Each op names the local tensors it reads (``input_names``) and writes (``output_names``); ``dag.mangle``
turns those names into slot indices. The payloads (a built tensor, a model's metadata, a parsed script call)
are opaque here: the DAG layer only moves them around. Plain classes, not dataclasses: every DAG request
builds its ops, and mypyc leaves a dataclass's generated ``__init__`` interpreted (docs/adding-a-command.md).
"""

from __future__ import annotations

from typing import Any, Final


class TensorSetOp:
    """``AI.TENSORSET name ...``: the tensor is built at parse time; the op is done before it is queued."""

    __slots__ = ("name", "tensor")

    def __init__(self, name: bytes, tensor: Any) -> None:
        self.name: Final = name
        self.tensor: Final = tensor

    @property
    def input_names(self) -> tuple[bytes, ...]:
        return ()

    @property
    def output_names(self) -> tuple[bytes, ...]:
        return (self.name,)


class TensorGetOp:
    """``AI.TENSORGET name [META] [BLOB|VALUES]``: answered from the slot when the reply is built."""

    __slots__ = ("fmt", "name")

    def __init__(self, name: bytes, fmt: Any) -> None:
        self.name: Final = name
        self.fmt: Final = fmt

    @property
    def input_names(self) -> tuple[bytes, ...]:
        return (self.name,)

    @property
    def output_names(self) -> tuple[bytes, ...]:
        return ()


class ModelOp:
    """``AI.MODELEXECUTE`` / ``AI.MODELRUN`` inside a DAG: the model is looked up at parse time."""

    __slots__ = ("input_names", "key", "meta", "output_names")

    def __init__(self, key: bytes, meta: Any, input_names: tuple[bytes, ...], output_names: tuple[bytes, ...]) -> None:
        self.key: Final = key
        self.meta: Final = meta
        self.input_names: Final = input_names
        self.output_names: Final = output_names


class ScriptOp:
    """``AI.SCRIPTEXECUTE`` / ``AI.SCRIPTRUN`` inside a DAG: the script is looked up at parse time."""

    __slots__ = ("input_names", "key", "meta", "output_names", "request")

    def __init__(self, key: bytes, meta: Any, request: Any, input_names: tuple[bytes, ...],
                 output_names: tuple[bytes, ...]) -> None:
        self.key: Final = key
        self.meta: Final = meta
        self.request: Final = request
        self.input_names: Final = input_names
        self.output_names: Final = output_names


DagOp = TensorSetOp | TensorGetOp | ModelOp | ScriptOp
