"""Parsing the graph commands (pure): AI.GRAPHSTORE's header and ops, AI.GRAPHEXECUTE, AI.GRAPHGET's flags.

A graph's ops are AI.DAGEXECUTE's (dag_ops.py), checked with the same parsers, but at store time, when a
model or script named may not exist yet: a model op is checked against the counts it declares itself
(``INPUTS n`` / ``OUTPUTS m``); whether they fit the model is checked when the graph runs, as a DAG does.
Every error names its op: ``ERR graph op 3: ...`` (op 1 is the first after the header).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends import errors as msgs
from backends.errors import AIError, parse_strict_int, wrong_arity
from backends.tensor_args import build_tensor, parse_tensorset
from dag.graph_plan import CONSTANT_KIND, MODEL_KIND, SCRIPT_KIND, GraphOpSpec, OpIO, op_error
from dag.parse import DAGEXECUTE, OP_SEPARATOR, collect_op, op_name, parse_timeout
from server.commands.args import ArgCursor
from server.commands.dag_ops import allowed_in_dag
from server.commands.model_args import check_modelexecute_arity, parse_modelexecute
from server.commands.script_args import parse_scriptexecute

COMPILED, INTERPRETED = "COMPILED", "INTERPRETED"


@dataclass(frozen=True, slots=True)
class GraphStoreRequest:
    """AI.GRAPHSTORE parsed: the key, the tag, the declared inputs and outputs, and every op checked."""

    key: bytes
    tag: bytes
    inputs: tuple[bytes, ...]
    outputs: tuple[bytes, ...]
    ops: tuple[GraphOpSpec, ...]


@dataclass(frozen=True, slots=True)
class GraphExecuteRequest:
    """AI.GRAPHEXECUTE parsed: the graph key, the keys bound to its inputs and outputs, TIMEOUT and MODE."""

    key: bytes
    inputs: tuple[bytes, ...]
    outputs: tuple[bytes, ...]
    timeout_ms: int | None
    mode: str


def _names(cursor: ArgCursor, keyword: bytes, what: str, minimum: int) -> tuple[bytes, ...]:
    """``KEYWORD n name...`` at the cursor (n ≥ ``minimum``)."""
    if not cursor.match(keyword):
        raise AIError(msgs.GRAPH_STORE_SYNTAX_MSG)
    count = parse_strict_int(cursor.next()) if cursor.left else None
    if count is None or count < minimum:
        raise AIError(msgs.GRAPH_COUNT_FMT.format(what=what))
    names = cursor.take(count)
    if len(names) < count or OP_SEPARATOR in names:
        raise AIError(msgs.GRAPH_COUNT_MISMATCH_FMT.format(what=what))
    return tuple(names)


def parse_graphstore(argv: list[bytes]) -> GraphStoreRequest:
    """AI.GRAPHSTORE key [TAG tag] INPUTS n name... OUTPUTS m name... |> op [|> op ...]"""
    if len(argv) < 7:
        raise AIError(msgs.GRAPH_STORE_ARITY_MSG)
    cursor = ArgCursor(argv, 2)
    tag = cursor.next() if cursor.match(b"TAG") and cursor.left else b""
    inputs = _names(cursor, b"INPUTS", "INPUTS", 0)
    outputs = _names(cursor, b"OUTPUTS", "OUTPUTS", 1)
    ops: list[GraphOpSpec] = []
    while cursor.left:
        if cursor.next() != OP_SEPARATOR:
            raise AIError(msgs.GRAPH_STORE_SYNTAX_MSG)
        op_argv = collect_op(argv, cursor.pos)
        cursor.pos += len(op_argv)
        ops.append(graph_op(len(ops), op_argv))
    if not ops:
        raise AIError(msgs.GRAPH_NO_OPS_MSG)
    return GraphStoreRequest(argv[1], tag, inputs, outputs, tuple(ops))


def graph_op(index: int, argv: list[bytes]) -> GraphOpSpec:
    """Check one op's name, arity and grammar; its kind and the names it reads and writes."""
    try:
        return _graph_op(argv)
    except AIError as exc:
        raise op_error(index, exc) from None


def _graph_op(argv: list[bytes]) -> GraphOpSpec:
    name = op_name(argv)
    if not name:
        raise AIError(msgs.GRAPH_EMPTY_OP_MSG)
    if name == b"AI.TENSORGET":
        raise AIError(msgs.GRAPH_NOT_A_GRAPH_OP_FMT.format(op=name.decode()))
    allowed_in_dag(name, DAGEXECUTE)
    if name == b"AI.TENSORSET":
        request = parse_tensorset(argv)
        build_tensor(request)  # a bad payload is refused at store time
        return GraphOpSpec(CONSTANT_KIND, None, OpIO((), (request.key,), constant=True), tuple(argv))
    if name == b"AI.MODELEXECUTE":
        check_modelexecute_arity(argv)
        n_in = declared_count(argv, 3)
        req = parse_modelexecute(argv, n_in, declared_count(argv, 5 + n_in))
        _no_timeout(req.timeout_ms)
        return GraphOpSpec(MODEL_KIND, argv[1], OpIO(req.inputs, req.outputs), tuple(argv))
    script = parse_scriptexecute(argv, standalone=False)
    _no_timeout(script.timeout_ms)
    return GraphOpSpec(SCRIPT_KIND, argv[1], OpIO(script.inputs, script.outputs), tuple(argv))


def declared_count(argv: list[bytes], pos: int) -> int:
    """The count a model op declares at ``pos`` (0 when it is not a number: the parser then says why)."""
    value = parse_strict_int(argv[pos]) if pos < len(argv) else None
    return value if value is not None and value > 0 else 0


def _no_timeout(timeout_ms: int | None) -> None:
    if timeout_ms is not None:
        raise AIError(msgs.DAG_TIMEOUT_IN_OP_MSG)


def parse_graphexecute(argv: list[bytes]) -> GraphExecuteRequest:
    """AI.GRAPHEXECUTE key INPUTS n key... OUTPUTS m key... [TIMEOUT ms] [MODE COMPILED|INTERPRETED]"""
    if len(argv) < 6:
        raise AIError(msgs.GRAPH_EXECUTE_ARITY_MSG)
    cursor = ArgCursor(argv, 2)
    inputs = _bound(cursor, b"INPUTS", 0)
    outputs = _bound(cursor, b"OUTPUTS", 1)
    timeout_ms: int | None = None
    mode, seen = COMPILED, set()
    while cursor.left:
        token = cursor.next()
        word = token.upper()
        if word not in (b"TIMEOUT", b"MODE") or word in seen:
            raise AIError(msgs.GRAPH_EXECUTE_UNEXPECTED_FMT.format(arg=token.decode(errors="replace")))
        seen.add(word)
        value = cursor.next() if cursor.left else None
        if word == b"TIMEOUT":
            timeout_ms = parse_timeout(value, msgs.NO_TIMEOUT_VALUE_MSG)
        elif value is None or value.upper() not in (COMPILED.encode(), INTERPRETED.encode()):
            raise AIError(msgs.GRAPH_MODE_MSG)
        else:
            mode = value.upper().decode()
    return GraphExecuteRequest(argv[1], inputs, outputs, timeout_ms, mode)


def _bound(cursor: ArgCursor, keyword: bytes, minimum: int) -> tuple[bytes, ...]:
    """``INPUTS n key...`` / ``OUTPUTS m key...`` of AI.GRAPHEXECUTE."""
    if not cursor.match(keyword):
        raise AIError(msgs.GRAPH_EXECUTE_SYNTAX_MSG)
    count = parse_strict_int(cursor.next()) if cursor.left else None
    what = keyword.decode()
    if count is None or count < minimum:
        raise AIError(msgs.GRAPH_COUNT_FMT.format(what=what))
    keys = cursor.take(count)
    if len(keys) < count:
        raise AIError(msgs.GRAPH_COUNT_MISMATCH_FMT.format(what=what))
    return tuple(keys)


def parse_graphget_flags(argv: list[bytes]) -> tuple[bool, bool]:
    """AI.GRAPHGET key [META] [SOURCE]: (meta, source); no flag means META."""
    if not 2 <= len(argv) <= 4:
        raise wrong_arity(argv[0].decode(errors="replace"))
    flags = {flag.upper() for flag in argv[2:]}
    if not flags <= {b"META", b"SOURCE"}:
        raise AIError(msgs.GRAPH_GET_FLAGS_MSG)
    return (not flags or b"META" in flags), b"SOURCE" in flags
