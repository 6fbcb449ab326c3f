"""Parsing the graph commands (server/commands/graph_args.py): the store-time op checks name their op."""

from __future__ import annotations

import pytest

from backends.errors import AIError
from server.commands.graph_args import parse_graphexecute, parse_graphget_flags, parse_graphstore

HEADER = "AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 1 y"
MODEL_OP = "AI.MODELEXECUTE m INPUTS 1 x OUTPUTS 1 y"


def _argv(text: str) -> list[bytes]:
    return [part.encode() for part in text.split()]


def _store_error(text: str) -> str:
    with pytest.raises(AIError) as caught:
        parse_graphstore(_argv(text))
    return caught.value.message


def test_a_graph_with_a_constant_a_model_and_a_script() -> None:
    req = parse_graphstore(_argv(
        "AI.GRAPHSTORE g TAG v1 INPUTS 1 x OUTPUTS 1 y |> AI.TENSORSET k FLOAT 2 VALUES 1 2 "
        "|> AI.MODELEXECUTE m INPUTS 2 x k OUTPUTS 1 t |> AI.SCRIPTEXECUTE s bar KEYS 1 key INPUTS 1 t OUTPUTS 1 y"))
    assert (req.key, req.tag, req.inputs, req.outputs) == (b"g", b"v1", (b"x",), (b"y",))
    assert [(op.kind, op.key) for op in req.ops] == [("constant", None), ("model", b"m"), ("script", b"s")]
    assert [op.io.inputs for op in req.ops] == [(), (b"x", b"k"), (b"t",)]
    assert [op.io.outputs for op in req.ops] == [(b"k",), (b"t",), (b"y",)]
    assert req.ops[0].io.constant and req.ops[2].argv[0] == b"AI.SCRIPTEXECUTE"


def test_op_errors_name_the_op() -> None:
    assert _store_error(f"{HEADER} |> {MODEL_OP} |> AI.TENSORGET y") == \
        "ERR graph op 2: AI.TENSORGET is not a graph op (AI.MODELEXECUTE, AI.SCRIPTEXECUTE, AI.TENSORSET)"
    assert _store_error(f"{HEADER} |> AI.MODELRUN m INPUTS x OUTPUTS y") == \
        "ERR graph op 1: Deprecated AI.MODELRUN cannot be used in AI.DAGEXECUTE command"
    assert _store_error(f"{HEADER} |> {MODEL_OP} |> AI.INFO m") == "ERR graph op 2: Unsupported command within DAG"
    assert _store_error(f"{HEADER} |> AI.MODELEXECUTE m INPUTS 1 x") == \
        "ERR graph op 1: wrong number of arguments for 'AI.MODELEXECUTE' command"
    assert _store_error(f"{HEADER} |> AI.MODELEXECUTE m INPUTS 2 x OUTPUTS 1 y") == \
        "ERR graph op 1: OUTPUTS not specified"
    assert _store_error(f"{HEADER} |> {MODEL_OP} TIMEOUT 5") == "ERR graph op 1: TIMEOUT not allowed within a DAG command"
    assert _store_error(f"{HEADER} |> AI.SCRIPTEXECUTE s bar INPUTS 1 x OUTPUTS 1 y TIMEOUT 5") == \
        "ERR graph op 1: TIMEOUT not allowed within a DAG command"
    assert _store_error(f"{HEADER} |> AI.TENSORSET k FLOAT 2 VALUES 1 |> {MODEL_OP}") == \
        "ERR graph op 1: wrong number of values was given in 'AI.TENSORSET' command"
    assert _store_error(f"{HEADER} |> {MODEL_OP} |> AI.TENSORSET k BADTYPE 1").startswith("ERR graph op 2: ")
    assert _store_error(f"{HEADER} |> {MODEL_OP} |> |> {MODEL_OP}") == "ERR graph op 2: empty op"


def test_header_errors() -> None:
    assert _store_error("AI.GRAPHSTORE g INPUTS 1") == "ERR wrong number of arguments for 'AI.GRAPHSTORE' command"
    assert _store_error(f"AI.GRAPHSTORE g OUTPUTS 1 y INPUTS 1 x |> {MODEL_OP}").startswith("ERR AI.GRAPHSTORE key")
    assert _store_error(f"AI.GRAPHSTORE g INPUTS -1 x OUTPUTS 1 y |> {MODEL_OP}") == "ERR invalid INPUTS count"
    assert _store_error(f"AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 0 |> {MODEL_OP}") == "ERR invalid OUTPUTS count"
    assert _store_error(f"AI.GRAPHSTORE g INPUTS 2 x |> {MODEL_OP}") == \
        "ERR the number of INPUTS names does not match the count"
    assert _store_error("AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 1 y extra") .startswith("ERR AI.GRAPHSTORE key")
    assert _store_error("AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 1 y") == "ERR the graph has no ops"
    assert _store_error("AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 1 y |>") == "ERR graph op 1: empty op"


def test_graphexecute() -> None:
    req = parse_graphexecute(_argv("AI.GRAPHEXECUTE g INPUTS 2 a b OUTPUTS 1 c MODE interpreted TIMEOUT 50"))
    assert (req.key, req.inputs, req.outputs, req.timeout_ms, req.mode) == (b"g", (b"a", b"b"), (b"c",), 50,
                                                                            "INTERPRETED")
    assert parse_graphexecute(_argv("AI.GRAPHEXECUTE g INPUTS 0 OUTPUTS 1 c")).mode == "COMPILED"
    for text, message in (
        ("AI.GRAPHEXECUTE g INPUTS 1 a", "ERR wrong number of arguments for 'AI.GRAPHEXECUTE' command"),
        ("AI.GRAPHEXECUTE g OUTPUTS 1 c INPUTS 1 a", "ERR AI.GRAPHEXECUTE key INPUTS n key..."),
        ("AI.GRAPHEXECUTE g INPUTS 1 a OUTPUTS 1 c MODE FAST", "ERR MODE must be COMPILED or INTERPRETED"),
        ("AI.GRAPHEXECUTE g INPUTS 1 a OUTPUTS 1 c TIMEOUT 0", "ERR Invalid value for TIMEOUT"),
        ("AI.GRAPHEXECUTE g INPUTS 1 a OUTPUTS 1 c TIMEOUT 5 TIMEOUT 5",
         "ERR Invalid AI.GRAPHEXECUTE command. Unexpected argument: TIMEOUT"),
        ("AI.GRAPHEXECUTE g INPUTS 1 a OUTPUTS 3 c d", "ERR the number of OUTPUTS names does not match the count"),
    ):
        with pytest.raises(AIError) as caught:
            parse_graphexecute(_argv(text))
        assert caught.value.message.startswith(message), text


def test_graphget_flags() -> None:
    assert parse_graphget_flags(_argv("AI.GRAPHGET g")) == (True, False)
    assert parse_graphget_flags(_argv("AI.GRAPHGET g source")) == (False, True)
    assert parse_graphget_flags(_argv("AI.GRAPHGET g SOURCE META")) == (True, True)
    with pytest.raises(AIError, match=r"AI.GRAPHGET key"):
        parse_graphget_flags(_argv("AI.GRAPHGET g BLOB"))
