"""Whether a TorchScript module may write into a tensor in place, read from its graph once, at load.

A run's inputs are read-only views of stored bytes (the value in the store's reply, or this server's copy of
it). A model that never writes in place can take them as they are; one that may (``x.add_(1)``, an
``nn.ReLU(inplace=True)``, an ``out=`` op) gets copies, so the stored bytes never change under a run. The test
is conservative: an op whose schema marks any argument as written (``Tensor(a!)``), a call left un-inlined, or
an op without a schema counts as a write, wherever it is in the graph.

    writes_in_place(torch.jit.load(io.BytesIO(blob)))   # True: copy the inputs
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, Final

import torch

# graph bookkeeping nodes without a schema that never touch tensor memory
_PURE_PRIM_NODES: Final = frozenset({
    "prim::Constant", "prim::GetAttr", "prim::SetAttr", "prim::ListConstruct", "prim::ListUnpack",
    "prim::TupleConstruct", "prim::TupleUnpack", "prim::TupleIndex", "prim::DictConstruct", "prim::If",
    "prim::Loop", "prim::Uninitialized", "prim::RaiseException", "prim::unchecked_cast", "prim::NumToTensor",
})
_NO_SCHEMA: Final = "(no schema)"


def writes_in_place(module: torch.jit.ScriptModule) -> bool:
    """Whether ``module``'s forward (with every call it makes inlined) may write into any tensor it holds."""
    try:
        graph = module.inlined_graph
    except (AttributeError, RuntimeError):  # no forward graph to read: assume the worst
        return True
    return any(_may_write(node) for node in _nodes(graph.block()))


def allow_read_only_inputs() -> None:
    """Silence torch's one-time warning for a tensor made over read-only memory: for a module that never writes
    in place (``writes_in_place``), that is what is meant."""
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


def _nodes(block: Any) -> Iterator[Any]:
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _nodes(inner)


def _may_write(node: Any) -> bool:
    schema = node.schema()
    if schema != _NO_SCHEMA:
        return "!" in schema
    return node.kind() not in _PURE_PRIM_NODES
