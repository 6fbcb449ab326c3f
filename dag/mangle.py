"""Local names → slot indices: single assignment, so reusing a name in a DAG is safe.

Every write of a name makes a new slot (a new version); a reader binds to the version current at its
position in the op list, and an op's inputs are bound before its own outputs, so an op may read and write
the same name. Reading a name that only a later op produces is an error, which makes every DAG acyclic
and its dependency order the command order. RedisAI 1.2.7 binds names the same way. Pure: no store, no
threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from backends import errors as msgs
from backends.errors import AIError
from dag.ops import DagOp


class ResolvedDag:
    """Slot indices for every LOAD, op input, op output and PERSIST name (a plain class: one per DAG request)."""

    __slots__ = ("load_slots", "n_slots", "op_inputs", "op_outputs", "persist")

    def __init__(self, n_slots: int, load_slots: tuple[int, ...], op_inputs: tuple[tuple[int, ...], ...],
                 op_outputs: tuple[tuple[int, ...], ...], persist: tuple[tuple[bytes, int], ...]) -> None:
        self.n_slots: Final = n_slots
        self.load_slots: Final = load_slots
        self.op_inputs: Final = op_inputs
        self.op_outputs: Final = op_outputs
        self.persist: Final = persist


def resolve(load: Sequence[bytes], ops: Sequence[DagOp], persist: Sequence[bytes]) -> ResolvedDag:
    current: dict[bytes, int] = {}
    n_slots = 0
    load_slots = []
    for name in load:
        load_slots.append(n_slots)
        current.setdefault(name, n_slots)  # a name LOADed twice keeps its first slot, as RedisAI does
        n_slots += 1
    op_inputs, op_outputs = [], []
    for op in ops:
        try:
            op_inputs.append(tuple(current[name] for name in op.input_names))
        except KeyError:
            raise AIError(msgs.DAG_INPUT_NOT_FOUND_MSG) from None
        outputs = []
        for name in op.output_names:
            current[name] = n_slots
            outputs.append(n_slots)
            n_slots += 1
        op_outputs.append(tuple(outputs))
    try:
        persisted = tuple((name, current[name]) for name in persist)
    except KeyError:
        raise AIError(msgs.DAG_PERSIST_NOT_FOUND_MSG) from None
    return ResolvedDag(n_slots, tuple(load_slots), tuple(op_inputs), tuple(op_outputs), persisted)
