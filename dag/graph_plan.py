"""A stored graph's compiled form: slots, dependency counters, consumer lists, an order to run it in (pure).

``plan_graph`` turns a graph's declared inputs and outputs and, per op, the graph-local names it reads and
writes into a ``GraphPlan``, once, at store time:

* every name gets one slot (names are single-assignment: a name is an input or the output of exactly one op);
* each op gets its input and output slots, the ops that consume its outputs, and how many distinct ops it
  waits for (its dependency counter at the start of a run; inputs and constants are ready before it);
* the keys a run reads besides its inputs (the models and scripts named) are listed once;
* the ops get an order in which every op comes after its producers (constants first, then ties by op
  index), which the interpreted mode feeds the DAG engine and in which the first error of a run is reported.

It checks what can be checked without the store: every name read is defined, no name is defined twice, the
graph has no cycle, and every declared output is defined. Errors name the op by its index (1 = the first op
after the header). ``encode_plan`` / ``decode_plan`` keep it in the store as compact JSON with a format
version; a version this build does not know is refused with a clear error.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from backends import errors as msgs
from backends.errors import AIError

PLAN_FORMAT = 1
MODEL_KIND, SCRIPT_KIND, CONSTANT_KIND = "model", "script", "constant"


@dataclass(frozen=True, slots=True)
class OpIO:
    """What the planner knows of one op: the names it reads and writes; a ``constant`` (AI.TENSORSET) is done
    before the run starts, so its consumers do not wait for it."""

    inputs: tuple[bytes, ...]
    outputs: tuple[bytes, ...]
    constant: bool = False


@dataclass(frozen=True, slots=True)
class GraphOpSpec:
    """One op as stored: its kind (``model``, ``script``, ``constant``), the model or script key it runs (None
    for a constant), the names it reads and writes, and its argv (graph-local names, object keys)."""

    kind: str
    key: bytes | None
    io: OpIO
    argv: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """The compiled form of a graph (see the module docstring); op lists are indexed by op index (0-based)."""

    n_slots: int
    input_slots: tuple[int, ...]
    output_slots: tuple[int, ...]
    op_inputs: tuple[tuple[int, ...], ...]
    op_outputs: tuple[tuple[int, ...], ...]
    consumers: tuple[tuple[int, ...], ...]
    deps: tuple[int, ...]
    order: tuple[int, ...]
    # the ops by device, as far as the models and scripts named were known when the graph was stored (a run
    # groups them by the devices its objects have then: one may be stored, or replaced, later)
    groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # the keys a run reads besides its inputs: the models and the scripts the ops name, each once
    models: tuple[bytes, ...] = ()
    scripts: tuple[bytes, ...] = ()

    @property
    def roots(self) -> tuple[int, ...]:
        """The ops that can start as soon as the inputs are bound, in run order."""
        return tuple(op for op in self.order if self.deps[op] == 0)


def op_error(index: int, error: AIError | str) -> AIError:
    """``ERR graph op N: <what>`` for the op at 0-based ``index`` (N counts from 1)."""
    text = error.message if isinstance(error, AIError) else error
    return AIError(msgs.GRAPH_OP_ERROR_FMT.format(op=index + 1, detail=text.removeprefix(msgs.ERROR_PREFIX)))


def _name(raw: bytes) -> str:
    return raw.decode(errors="replace")


def _define(inputs: Sequence[bytes], ops: Sequence[OpIO]) -> tuple[dict[bytes, int], dict[bytes, int]]:
    """Slot of every name, and the op producing each op-made name; a second definition is an error."""
    slots: dict[bytes, int] = {}
    producer: dict[bytes, int] = {}
    for name in inputs:
        if name in slots:
            raise AIError(msgs.GRAPH_INPUT_TWICE_FMT.format(name=_name(name)))
        slots[name] = len(slots)
    for index, op in enumerate(ops):
        for name in op.outputs:
            if name in slots:
                raise op_error(index, msgs.GRAPH_DEFINED_TWICE_FMT.format(name=_name(name)))
            slots[name] = len(slots)
            if not op.constant:
                producer[name] = index
    return slots, producer


def _edges(ops: Sequence[OpIO], slots: dict[bytes, int], producer: dict[bytes, int]) -> list[list[int]]:
    """For each op, the distinct ops it waits for; a name nobody defines is an error."""
    waits: list[list[int]] = []
    for index, op in enumerate(ops):
        found: dict[int, None] = {}
        for name in op.inputs:
            if name not in slots:
                raise op_error(index, msgs.GRAPH_UNDEFINED_FMT.format(name=_name(name)))
            if name in producer:
                found[producer[name]] = None
        waits.append(list(found))
    return waits


def _order(waits: list[list[int]], constants: set[int]) -> list[int]:
    """Kahn's algorithm: the constants first (a DAG defines a name before it is read), then the smallest op
    index first among the ready ones; what is left over lies on a cycle."""
    consumers: list[list[int]] = [[] for _ in waits]
    for op, producers in enumerate(waits):
        for producer in producers:
            consumers[producer].append(op)
    left = [len(producers) for producers in waits]
    ready = [(op not in constants, op) for op, count in enumerate(left) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, op = heapq.heappop(ready)
        order.append(op)
        for consumer in consumers[op]:
            left[consumer] -= 1
            if left[consumer] == 0:
                heapq.heappush(ready, (True, consumer))
    if len(order) < len(waits):
        stuck = min(op for op, count in enumerate(left) if count > 0)
        raise op_error(stuck, msgs.GRAPH_CYCLE_MSG)
    return order


def plan_graph(inputs: Sequence[bytes], outputs: Sequence[bytes], ops: Sequence[OpIO]) -> GraphPlan:
    """Compile and validate (see the module docstring); raises the first error found."""
    slots, producer = _define(inputs, ops)
    waits = _edges(ops, slots, producer)
    order = _order(waits, {index for index, op in enumerate(ops) if op.constant})
    for name in outputs:
        if name not in slots:
            raise AIError(msgs.GRAPH_OUTPUT_UNDEFINED_FMT.format(name=_name(name)))
    if len(set(outputs)) != len(outputs):
        raise AIError(msgs.GRAPH_OUTPUT_TWICE_MSG)
    consumers: list[list[int]] = [[] for _ in ops]
    for op, producers in enumerate(waits):
        for waited in producers:
            consumers[waited].append(op)
    return GraphPlan(
        n_slots=len(slots), input_slots=tuple(slots[n] for n in inputs), output_slots=tuple(slots[n] for n in outputs),
        op_inputs=tuple(tuple(slots[n] for n in op.inputs) for op in ops),
        op_outputs=tuple(tuple(slots[n] for n in op.outputs) for op in ops),
        consumers=tuple(tuple(c) for c in consumers), deps=tuple(len(w) for w in waits), order=tuple(order))


def with_keys(plan: GraphPlan, ops: Sequence[GraphOpSpec]) -> GraphPlan:
    """The plan with the keys its runs read: the models and scripts ``ops`` name, in op order, each once."""
    named = [(op.kind, op.key) for op in ops if op.key is not None]
    models = tuple(dict.fromkeys(key for kind, key in named if kind == MODEL_KIND))
    scripts = tuple(dict.fromkeys(key for kind, key in named if kind == SCRIPT_KIND))
    return replace(plan, models=models, scripts=scripts)


def group_by_device(plan: GraphPlan, devices: Sequence[str | None]) -> GraphPlan:
    """The plan with its ops grouped by ``devices`` (one per op: "" where not known yet, None for a constant,
    which runs nowhere), in run order."""
    groups: dict[str, list[int]] = {}
    for op in plan.order:
        device = devices[op]
        if device is not None:
            groups.setdefault(device, []).append(op)
    return replace(plan, groups=tuple((device, tuple(ops)) for device, ops in groups.items()))


def encode_plan(plan: GraphPlan) -> bytes:
    """The plan as compact JSON, with its format version."""
    body = {"format": PLAN_FORMAT, "slots": plan.n_slots, "inputs": plan.input_slots, "outputs": plan.output_slots,
            "op_inputs": plan.op_inputs, "op_outputs": plan.op_outputs, "consumers": plan.consumers,
            "deps": plan.deps, "order": plan.order, "groups": [[device, ops] for device, ops in plan.groups],
            "models": _texts(plan.models), "scripts": _texts(plan.scripts)}
    return json.dumps(body, separators=(",", ":")).encode()


def _texts(keys: tuple[bytes, ...]) -> list[str]:
    return [key.decode("latin-1") for key in keys]


def _keys(value: Any) -> tuple[bytes, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("not a list of keys")
    return tuple(item.encode("latin-1") for item in value)


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(item, int) for item in value):
        raise ValueError("not a list of integers")
    return tuple(value)


def decode_plan(raw: bytes) -> GraphPlan:
    """The plan stored by ``encode_plan``; a clear error for another format version or a damaged value."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AIError(msgs.GRAPH_DAMAGED_MSG) from exc
    if not isinstance(body, dict) or "format" not in body:
        raise AIError(msgs.GRAPH_DAMAGED_MSG)
    if body.get("format") != PLAN_FORMAT:
        raise AIError(msgs.GRAPH_FORMAT_FMT.format(found=body.get("format"), known=PLAN_FORMAT))
    try:
        plan = GraphPlan(int(body["slots"]), _ints(body["inputs"]), _ints(body["outputs"]),
                         tuple(_ints(x) for x in body["op_inputs"]), tuple(_ints(x) for x in body["op_outputs"]),
                         tuple(_ints(x) for x in body["consumers"]), _ints(body["deps"]), _ints(body["order"]),
                         tuple((str(device), _ints(ops)) for device, ops in body.get("groups", [])),
                         _keys(body.get("models", [])), _keys(body.get("scripts", [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise AIError(msgs.GRAPH_DAMAGED_MSG) from exc
    _check_shape(plan)
    return plan


def _check_shape(plan: GraphPlan) -> None:
    """Every list agrees on the number of ops and every slot is in range: a damaged plan never runs."""
    n_ops = len(plan.deps)
    lists = (plan.op_inputs, plan.op_outputs, plan.consumers)
    slots = [s for group in (plan.op_inputs, plan.op_outputs) for op in group for s in op]
    slots += [*plan.input_slots, *plan.output_slots]
    if (any(len(items) != n_ops for items in lists) or sorted(plan.order) != list(range(n_ops))
            or any(not 0 <= s < plan.n_slots for s in slots)
            or any(not 0 <= c < n_ops for op in plan.consumers for c in op)):
        raise AIError(msgs.GRAPH_DAMAGED_MSG)
