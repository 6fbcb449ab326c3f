"""Property: on random valid graphs, COMPILED and INTERPRETED give identical outputs and identical errors.

The graphs are drawn over tiny TorchScript and ONNX models and a TorchScript script, on CPU and CPU:1, with
constants, ops in any order (the graph runs producers first), fan-out and fan-in. Some graphs hold one op
that fails at run time (a matmul of mismatched shapes, or a model that is not stored); at most one, so
that which error a run reports never depends on how two devices raced.
"""

from __future__ import annotations

from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import models
from tests.scripts import SCRIPT
from tests.support import RunningServer

# key → (inputs, outputs)
ARITY = {"add": (2, 1), "add1": (2, 1), "dbl": (1, 1), "dbl1": (1, 1), "sd": (2, 2), "mm": (2, 1), "oadd": (2, 1),
         "s": (2, 1)}
FAILING = ("shape", "absent")
Op = list[object]


def _setup(conn: redis.Redis) -> None:
    for key, blob, device in (("add", models.torch_add(), "CPU"), ("add1", models.torch_add(), "CPU:1"),
                              ("dbl", models.torch_double(), "CPU"), ("dbl1", models.torch_double(), "CPU:1"),
                              ("sd", models.torch_sum_and_diff(), "CPU:1"), ("mm", models.torch_matmul(), "CPU")):
        conn.execute_command("AI.MODELSTORE", key, "TORCH", device, "BLOB", blob)
    conn.execute_command("AI.MODELSTORE", "oadd", "ONNX", "CPU", "BLOB", models.onnx_add())
    conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    conn.execute_command("AI.TENSORSET", "in0", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
    conn.execute_command("AI.TENSORSET", "in1", "FLOAT", 2, 2, "VALUES", 0.5, -1, 2, 0)


def _call(key: str, inputs: list[str], outputs: list[str]) -> Op:
    head: Op = ["AI.SCRIPTEXECUTE", key, "bar"] if key == "s" else ["AI.MODELEXECUTE", key]
    return [*head, "INPUTS", len(inputs), *inputs, "OUTPUTS", len(outputs), *outputs]


values = st.lists(st.integers(-3, 3), min_size=4, max_size=4)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[str], list[str], list[Op], str]:
    """(inputs, outputs, ops in stored order, which failure: "", "shape" or "absent")."""
    inputs = [f"x{i}" for i in range(draw(st.integers(1, 2)))]
    names = list(inputs)
    ops: list[Op] = []
    n_ops = draw(st.integers(1, 7))
    failure = draw(st.sampled_from(["", "", *FAILING]))
    failing_at = draw(st.integers(0, n_ops - 1))
    for index in range(n_ops):
        if failure and index == failing_at:
            if failure == "shape":
                ops.append(["AI.TENSORSET", "bad", "FLOAT", 2, 3, "VALUES", 1, 2, 3, 4, 5, 6])
                ops.append(_call(draw(st.sampled_from(["mm", "oadd"])), ["bad", draw(st.sampled_from(names))],
                                 [f"f{index}"]))  # [2, 3] @ [2, 2], or a [2, 3] into ONNX's [2, 2]: refused
            else:
                ops.append(_call("absent", [draw(st.sampled_from(names))], [f"f{index}"]))
            names.append(f"f{index}")
            continue
        kind = draw(st.sampled_from([*ARITY, "const"]))
        if kind == "const":
            ops.append(["AI.TENSORSET", f"k{index}", "FLOAT", 2, 2, "VALUES", *draw(values)])
            names.append(f"k{index}")
            continue
        n_in, n_out = ARITY[kind]
        outputs = [f"t{index}_{o}" for o in range(n_out)]
        ops.append(_call(kind, [draw(st.sampled_from(names)) for _ in range(n_in)], outputs))
        names += outputs
    declared = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    order = draw(st.permutations(range(len(ops))))
    return inputs, declared, [ops[i] for i in order], failure


def _outcome(conn: redis.Redis, key: str, n_in: int, outputs: list[str], mode: str) -> tuple[Any, ...]:
    """The reply (or error text) and every output as TENSORGET META BLOB (or None when not written)."""
    bound = ["in0", "in1"][:n_in]
    try:
        reply: Any = conn.execute_command("AI.GRAPHEXECUTE", key, "INPUTS", n_in, *bound, "OUTPUTS", len(outputs),
                                          *outputs, "MODE", mode)
    except redis.ResponseError as exc:
        reply = f"error: {exc}"
    written = [conn.execute_command("AI.TENSORGET", out, "META", "BLOB") if conn.exists(out) else None
               for out in outputs]
    return reply, written


def test_compiled_and_interpreted_agree_on_random_graphs(server: RunningServer) -> None:
    conn = server.client()
    _setup(conn)
    examples: list[str] = []

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(graphs())
    def check(graph: tuple[list[str], list[str], list[Op], str]) -> None:
        inputs, declared, ops, failure = graph
        key = f"g{len(examples)}"
        examples.append(failure)
        parts = [part for op in ops for part in ("|>", *op)]
        assert conn.execute_command("AI.GRAPHSTORE", key, "INPUTS", len(inputs), *inputs, "OUTPUTS", len(declared),
                                    *declared, *parts) == b"OK"
        results = []
        for mode in ("COMPILED", "INTERPRETED", "COMPILED"):  # twice compiled: bound once, then reused
            outputs = [f"{key}:{mode}:{i}" for i in range(len(declared))]
            conn.delete(*outputs)
            results.append(_outcome(conn, key, len(inputs), outputs, mode))
        assert results[0] == results[1] == results[2]
        reply, written = results[0]
        if not failure:
            assert reply == b"OK" and None not in written
        elif failure == "absent":
            assert reply == "error: model key is empty" and written == [None] * len(declared)

    check()
    print("graph examples by failure kind:", {kind: examples.count(kind) for kind in ("", *FAILING)})
    assert examples
