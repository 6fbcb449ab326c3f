"""DAG ops: one small frozen dataclass per op kind (no struct with per-kind optional fields).

Each op names the local tensors it reads (``input_names``) and writes (``output_names``); ``dag.mangle``
turns those names into slot indices. The payloads (a built tensor, a model's metadata, a parsed script call)
are opaque here: the DAG layer only moves them around.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TensorSetOp:
    """``AI.TENSORSET name ...``: the tensor is built at parse time; the op is done before it is queued."""

    name: bytes
    tensor: Any

    @property
    def input_names(self) -> tuple[bytes, ...]:
        return ()

    @property
    def output_names(self) -> tuple[bytes, ...]:
        return (self.name,)


@dataclass(frozen=True, slots=True)
class TensorGetOp:
    """``AI.TENSORGET name [META] [BLOB|VALUES]``: answered from the slot when the reply is built."""

    name: bytes
    fmt: Any

    @property
    def input_names(self) -> tuple[bytes, ...]:
        return (self.name,)

    @property
    def output_names(self) -> tuple[bytes, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class ModelOp:
    """``AI.MODELEXECUTE`` / ``AI.MODELRUN`` inside a DAG: the model is looked up at parse time."""

    key: bytes
    meta: Any
    input_names: tuple[bytes, ...]
    output_names: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ScriptOp:
    """``AI.SCRIPTEXECUTE`` / ``AI.SCRIPTRUN`` inside a DAG: the script is looked up at parse time."""

    key: bytes
    meta: Any
    request: Any
    input_names: tuple[bytes, ...]
    output_names: tuple[bytes, ...]


DagOp = TensorSetOp | TensorGetOp | ModelOp | ScriptOp
