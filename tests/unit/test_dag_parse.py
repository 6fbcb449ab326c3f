"""DAG header parsing and local-name resolution, without a store."""

from __future__ import annotations

import pytest

from backends.errors import AIError
from dag.mangle import resolve
from dag.ops import DagOp, ModelOp, TensorGetOp, TensorSetOp
from dag.parse import DAGEXECUTE, DAGEXECUTE_RO, DAGRUN, DAGRUN_RO, DagKind, parse_header


def _argv(text: str) -> list[bytes]:
    return [part.encode() for part in text.split()]


def test_header_and_ops() -> None:
    header = parse_header(_argv("AI.DAGEXECUTE LOAD 2 a b PERSIST 1 c TIMEOUT 50 ROUTING r |> AI.TENSORGET a "
                                "|> AI.TENSORSET c FLOAT 1 VALUES 1"), DAGEXECUTE)
    assert header.error is None
    assert (header.load, header.persist, header.timeout_ms, header.routing) == ([b"a", b"b"], [b"c"], 50, b"r")
    assert header.ops == [_argv("AI.TENSORGET a"), _argv("AI.TENSORSET c FLOAT 1 VALUES 1")]


def test_keys_clause_counts_as_routing() -> None:
    header = parse_header(_argv("AI.DAGEXECUTE KEYS 1 k |> AI.TENSORSET a FLOAT 1"), DAGEXECUTE)
    assert header.error is None and header.keys == [b"k"]


@pytest.mark.parametrize(
    ("text", "kind", "error"),
    [
        ("AI.DAGEXECUTE LOAD 1 a |>", DAGEXECUTE, "ERR missing arguments for 'AI.DAGEXECUTE' command"),
        ("AI.DAGEXECUTE_RO LOAD 1 a |>", DAGEXECUTE_RO, "ERR missing arguments for 'AI.DAGEXECUTE_RO' command"),
        ("AI.DAGRUN |>", DAGRUN, "ERR wrong number of arguments for 'AI.DAGRUN' command"),
        ("AI.DAGRUN_RO", DAGRUN_RO, "ERR wrong number of arguments for 'AI.DAGRUN_RO' command"),
    ],
)
def test_arity(text: str, kind: DagKind, error: str) -> None:
    with pytest.raises(AIError) as info:
        parse_header(_argv(text), kind)
    assert info.value.message == error


@pytest.mark.parametrize(
    ("text", "kind", "error"),
    [
        ("AI.DAGRUN PERSIST 1 a BAD_ARG", DAGRUN, "ERR Invalid DAG command. Unexpected argument:  BAD_ARG"),
        ("AI.DAGEXECUTE LOAD 1 a LOAD 1 b |> AI.TENSORGET a", DAGEXECUTE,
         "ERR Invalid DAG command. Unexpected argument:  LOAD"),
        ("AI.DAGEXECUTE LOAD 1 a |> AI.TENSORGET a |>", DAGEXECUTE, "ERR Invalid DAG command. Unexpected argument:  |>"),
        ("AI.DAGEXECUTE LOAD x a |> AI.TENSORGET a", DAGEXECUTE,
         "ERR invalid or negative value found in number of keys to LOAD"),
        ("AI.DAGEXECUTE ROUTING r LOAD 3 a b", DAGEXECUTE,
         "ERR number of keys to LOAD into DAG does not match the number of given arguments"),
        ("AI.DAGEXECUTE_RO PERSIST 1 a |> AI.TENSORGET a", DAGEXECUTE_RO,
         "ERR PERSIST cannot be specified in a read-only DAG"),
        ("AI.DAGRUN_RO PERSIST 1 a |> AI.TENSORGET a", DAGRUN_RO, "ERR PERSIST cannot be specified in a read-only DAG"),
        ("AI.DAGEXECUTE PERSIST 2 a a |> AI.TENSORGET a", DAGEXECUTE, "ERR PERSIST keys must be unique"),
        ("AI.DAGEXECUTE PERSIST 0 a |> AI.TENSORGET a", DAGEXECUTE,
         "ERR invalid or negative value found in number of keys to PERSIST"),
        ("AI.DAGEXECUTE ROUTING r TIMEOUT |> AI.TENSORGET a", DAGEXECUTE, "ERR Invalid value for TIMEOUT"),
        ("AI.DAGEXECUTE TIMEOUT 10 |> AI.TENSORGET a", DAGEXECUTE,
         "ERR AI.DAGEXECUTE and AI.DAGEXECUTE_RO commands must contain at least one out of ROUTING, LOAD, PERSIST keywords"),
        ("AI.DAGEXECUTE LOAD 1 a TIMEOUT 10 ROUTING", DAGEXECUTE, "ERR Missing ROUTING value"),
        ("AI.DAGEXECUTE LOAD 1 a TIMEOUT 10 ROUTING r", DAGEXECUTE, "ERR DAG is empty"),
    ],
)
def test_header_errors(text: str, kind: DagKind, error: str) -> None:
    header = parse_header(_argv(text), kind)
    assert header.error is not None and header.error.message == error


def test_load_seen_before_a_later_header_error() -> None:
    header = parse_header(_argv("AI.DAGEXECUTE LOAD 1 a BOGUS |> AI.TENSORGET a"), DAGEXECUTE)
    assert header.load == [b"a"] and header.error is not None
    header = parse_header(_argv("AI.DAGEXECUTE BOGUS LOAD 1 a |> AI.TENSORGET a"), DAGEXECUTE)
    assert header.load == [] and header.error is not None


def test_load_keeps_the_keys_there_are_when_too_few_follow() -> None:
    """RedisAI loads each LOAD key before it counts them: a missing one is reported before the mismatch, so
    the caller gets the keys there are (it read none and answered the mismatch)."""
    header = parse_header(_argv("AI.DAGEXECUTE ROUTING r LOAD 3 nokey a"), DAGEXECUTE)
    assert header.load == [b"nokey", b"a"]
    assert header.error is not None and header.error.message == (
        "ERR number of keys to LOAD into DAG does not match the number of given arguments")


def test_a_repeated_persist_name_is_reported_before_too_few_names() -> None:
    header = parse_header(_argv("AI.DAGEXECUTE ROUTING r PERSIST 3 a a"), DAGEXECUTE)
    assert header.error is not None and header.error.message == "ERR PERSIST keys must be unique"


def test_an_empty_routing_value_counts_as_routing() -> None:
    header = parse_header([b"AI.DAGEXECUTE", b"ROUTING", b"", b"|>", b"AI.TENSORSET", b"x", b"FLOAT", b"1"],
                          DAGEXECUTE)
    assert header.error is None and header.routing == b""


def test_timeout_zero_means_none() -> None:
    header = parse_header(_argv("AI.DAGEXECUTE ROUTING r TIMEOUT 0 |> AI.TENSORGET a"), DAGEXECUTE)
    assert header.error is None and header.timeout_ms is None


def test_name_versions() -> None:
    ops: list[DagOp] = [TensorSetOp(b"t", "v1"), TensorGetOp(b"t", None), TensorSetOp(b"t", "v2"), TensorGetOp(b"t", None),
           ModelOp(b"m", None, (b"t", b"x"), (b"t",)), TensorGetOp(b"t", None)]
    resolved = resolve([b"x", b"x"], ops, [b"t"])
    assert resolved.load_slots == (0, 1)
    assert resolved.op_outputs[0] == (2,) and resolved.op_inputs[1] == (2,)
    assert resolved.op_outputs[2] == (3,) and resolved.op_inputs[3] == (3,)
    assert resolved.op_inputs[4] == (3, 0)  # reads the previous version of t; x keeps its first LOAD slot
    assert resolved.op_outputs[4] == (4,) and resolved.op_inputs[5] == (4,)
    assert resolved.persist == ((b"t", 4),) and resolved.n_slots == 5


def test_unknown_names() -> None:
    with pytest.raises(AIError, match="INPUT key cannot be found in DAG"):
        resolve([], [TensorGetOp(b"later", None), TensorSetOp(b"later", None)], [])
    with pytest.raises(AIError, match="PERSIST key cannot be found in DAG"):
        resolve([b"a"], [TensorGetOp(b"a", None)], [b"b"])
    assert resolve([b"a"], [TensorGetOp(b"a", None)], [b"a"]).persist == ((b"a", 0),)
