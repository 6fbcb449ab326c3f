"""The compiled form of a stored graph (dag/graph_plan.py): slots, counters, consumers, order, every error."""

from __future__ import annotations

import json

import pytest

from backends.errors import AIError
from dag.graph_plan import GraphOpSpec, OpIO, decode_plan, encode_plan, group_by_device, plan_graph, with_keys


def _io(inputs: str, outputs: str, constant: bool = False) -> OpIO:
    return OpIO(tuple(n.encode() for n in inputs.split()), tuple(n.encode() for n in outputs.split()), constant)


def _error(inputs: str, outputs: str, *ops: OpIO) -> str:
    with pytest.raises(AIError) as caught:
        plan_graph([n.encode() for n in inputs.split()], [n.encode() for n in outputs.split()], ops)
    return caught.value.message


def test_a_diamond_gets_slots_counters_consumers_and_an_order() -> None:
    # x → a (op 0); x → b (op 1); a, b → y (op 2)
    plan = plan_graph([b"x"], [b"y"], [_io("x", "a"), _io("x", "b"), _io("a b", "y")])
    assert plan.n_slots == 4 and plan.input_slots == (0,) and plan.output_slots == (3,)
    assert plan.op_inputs == ((0,), (0,), (1, 2)) and plan.op_outputs == ((1,), (2,), (3,))
    assert plan.deps == (0, 0, 2)
    assert plan.consumers == ((2,), (2,), ())
    assert plan.order == (0, 1, 2) and plan.roots == (0, 1)


def test_ops_may_come_in_any_order_and_run_producers_first() -> None:
    plan = plan_graph([b"x"], [b"y"], [_io("t", "y"), _io("x", "t")])
    assert plan.order == (1, 0) and plan.deps == (1, 0) and plan.consumers == ((), (0,))


def test_an_op_reading_one_producer_twice_waits_for_it_once() -> None:
    plan = plan_graph([b"x"], [b"y"], [_io("x", "a b"), _io("a b a", "y")])
    assert plan.deps == (0, 1) and plan.consumers == ((1,), ())


def test_constants_are_ready_at_the_start() -> None:
    plan = plan_graph([b"x"], [b"y"], [_io("", "k", constant=True), _io("x k", "y")])
    assert plan.deps == (0, 0) and plan.consumers == ((), ())


def test_an_output_may_be_an_input() -> None:
    plan = plan_graph([b"x"], [b"x", b"y"], [_io("x", "y")])
    assert plan.output_slots == (0, 1)


def test_every_error_names_its_op_counting_from_one() -> None:
    assert _error("x", "y", _io("x", "y"), _io("q", "z")) == \
        "ERR graph op 2: 'q' is not defined (neither a graph input nor the output of an op)"
    assert _error("x", "y", _io("x", "y"), _io("x", "y")) == \
        "ERR graph op 2: 'y' is already defined (graph names are single-assignment)"
    assert _error("x", "y", _io("x", "x")) == \
        "ERR graph op 1: 'x' is already defined (graph names are single-assignment)"
    assert _error("x", "y", _io("x", "y"), _io("y c", "b"), _io("b", "c")) == \
        "ERR graph op 2: the graph has a cycle through this op"
    assert _error("x", "y", _io("y", "y2"), _io("y2", "y")) == "ERR graph op 1: the graph has a cycle through this op"


def test_header_errors() -> None:
    assert _error("x x", "y", _io("x", "y")) == "ERR graph input 'x' is declared twice"
    assert _error("x", "z", _io("x", "y")) == "ERR graph output 'z' is not produced by any op nor a graph input"
    assert _error("x", "y y", _io("x", "y")) == "ERR graph outputs must be unique"


def test_the_plan_round_trips_through_its_stored_form() -> None:
    plan = plan_graph([b"x"], [b"y"], [_io("", "k", constant=True), _io("x k", "a"), _io("a", "y")])
    plan = group_by_device(plan, [None, "CPU", "CPU:1"])
    assert plan.groups == (("CPU", (1,)), ("CPU:1", (2,)))
    specs = [GraphOpSpec("constant", None, _io("", "k", True), ()), GraphOpSpec("model", b"m\xff", _io("x k", "a"), ()),
             GraphOpSpec("script", b"s", _io("a", "y"), ()), GraphOpSpec("model", b"m\xff", _io("a", "z"), ())]
    plan = with_keys(plan, specs)
    assert (plan.models, plan.scripts) == ((b"m\xff",), (b"s",))
    assert decode_plan(encode_plan(plan)) == plan


def test_an_unknown_format_version_or_a_damaged_plan_is_refused() -> None:
    plan = plan_graph([b"x"], [b"y"], [_io("x", "y")])
    body = json.loads(encode_plan(plan))
    body["format"] = 99
    with pytest.raises(AIError, match="format version 99; this server reads version 1"):
        decode_plan(json.dumps(body).encode())
    body["format"] = 1
    body["op_inputs"] = [[7]]  # a slot out of range
    for damaged in (json.dumps(body).encode(), b"not json", b"[1, 2]", b'{"format": 1}'):
        with pytest.raises(AIError, match="the stored graph is damaged"):
            decode_plan(damaged)


def test_constants_come_first_in_the_run_order() -> None:
    plan = plan_graph([b"x"], [b"y"], [_io("x k", "y"), _io("", "k", constant=True)])
    assert plan.order == (1, 0)
