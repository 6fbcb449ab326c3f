"""The keys of the AI commands whose keys move (``movablekeys``), found by the commands' own parsers.

Redis computes ``COMMAND GETKEYS`` from a command's key specs, or from the command's own key finder where
the specs cannot say it all (Redis's ``getkeys_proc``, a module's ``getkeys-api``; RedisAI registered its
run commands so). Ours are here: each parses the argv exactly as the command does, so a tensor named
``OUTPUTS`` among the inputs, or a DAG op's model key, is reported right. Each returns ``(key, flags)``
pairs with the flags of the key spec (server/commands/keyspecs.py) that describes the key, and raises
Redis's ``Invalid arguments specified for command`` where the command would not parse.

Usage: ``modelexecute_keys([b"AI.MODELEXECUTE", b"m", b"INPUTS", b"1", b"a", b"OUTPUTS", b"1", b"b"])``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from backends import errors as msgs
from backends.errors import AIError
from dag.parse import DAGEXECUTE, DAGEXECUTE_RO, DAGRUN, DAGRUN_RO, DagKind, op_name, parse_header
from server.commands.graph_args import declared_count, parse_graphexecute, parse_graphstore
from server.commands.keyspecs import OVERWRITE, READ, READ_WRITE, ROUTE_ONLY
from server.commands.model_args import (
    check_modelexecute_arity,
    check_modelrun_arity,
    input_keys_hint,
    output_keys_hint,
    parse_modelexecute,
)
from server.commands.script_args import parse_scriptexecute, parse_scriptrun

KeysWithFlags = list[tuple[bytes, tuple[str, ...]]]
KeyFinder = Callable[[list[bytes]], KeysWithFlags]
_RUN_OPS = (b"AI.MODELEXECUTE", b"AI.MODELRUN", b"AI.SCRIPTEXECUTE", b"AI.SCRIPTRUN")


def _tagged(keys: Iterable[bytes], flags: tuple[str, ...]) -> KeysWithFlags:
    return [(key, flags) for key in keys]


def _parsed(finder: KeyFinder) -> KeyFinder:
    """``finder`` with every parse error turned into GETKEYS's own error text."""

    def run(argv: list[bytes]) -> KeysWithFlags:
        try:
            return finder(argv)
        except (AIError, IndexError) as exc:
            raise AIError(msgs.INVALID_ARGS_GETKEYS_MSG) from exc

    run.__doc__ = finder.__doc__
    return run


@_parsed
def modelexecute_keys(argv: list[bytes]) -> KeysWithFlags:
    """AI.MODELEXECUTE key INPUTS n key... OUTPUTS m key...: the model, its inputs, its outputs."""
    check_modelexecute_arity(argv)
    n_inputs = declared_count(argv, 3)
    req = parse_modelexecute(argv, n_inputs, declared_count(argv, 5 + n_inputs))
    return [(argv[1], READ), *_tagged(req.inputs, READ), *_tagged(req.outputs, OVERWRITE)]


@_parsed
def modelrun_keys(argv: list[bytes]) -> KeysWithFlags:
    """AI.MODELRUN key [TIMEOUT ms] INPUTS key... OUTPUTS key... (deprecated): split at OUTPUTS, as it runs."""
    check_modelrun_arity(argv)
    return [(argv[1], READ), *_tagged(input_keys_hint(argv), READ), *_tagged(output_keys_hint(argv), OVERWRITE)]


@_parsed
def scriptexecute_keys(argv: list[bytes]) -> KeysWithFlags:
    """AI.SCRIPTEXECUTE key function [KEYS n key...] [INPUTS n key...] [ARGS ...] [OUTPUTS m key...]."""
    req = parse_scriptexecute(argv)
    return [(argv[1], READ), *_tagged(req.keys, READ_WRITE), *_tagged(req.inputs, READ),
            *_tagged(req.outputs, OVERWRITE)]


@_parsed
def scriptrun_keys(argv: list[bytes]) -> KeysWithFlags:
    """AI.SCRIPTRUN key function [TIMEOUT ms] INPUTS key... [$ key...] OUTPUTS key... (deprecated)."""
    req = parse_scriptrun(argv)
    return [(argv[1], READ), *_tagged(req.inputs, READ), *_tagged(req.outputs, OVERWRITE)]


@_parsed
def graphstore_keys(argv: list[bytes]) -> KeysWithFlags:
    """AI.GRAPHSTORE key ... |> op ...: the graph, and the model and script keys its ops run."""
    req = parse_graphstore(argv)
    return [(argv[1], OVERWRITE), *_tagged(dict.fromkeys(op.key for op in req.ops if op.key), READ)]


@_parsed
def graphexecute_keys(argv: list[bytes]) -> KeysWithFlags:
    """AI.GRAPHEXECUTE key INPUTS n key... OUTPUTS m key...: the graph, its inputs, its outputs."""
    req = parse_graphexecute(argv)
    return [(argv[1], READ), *_tagged(req.inputs, READ), *_tagged(req.outputs, OVERWRITE)]


def _op_keys(op: list[bytes]) -> KeysWithFlags:
    """A DAG op's model or script key, and a script op's KEYS (an op that does not parse fails the DAG)."""
    if op_name(op) not in _RUN_OPS or len(op) < 2:
        return []
    declared: tuple[bytes, ...] = ()
    if op_name(op) == b"AI.SCRIPTEXECUTE":
        try:
            declared = parse_scriptexecute(op, standalone=False).keys
        except AIError:
            declared = ()
    return [(op[1], READ), *_tagged(declared, READ_WRITE)]


def _dag_keys(kind: DagKind) -> KeyFinder:
    def find(argv: list[bytes]) -> KeysWithFlags:
        header = parse_header(argv, kind)
        if header.error is not None:
            raise header.error
        routing = [header.routing] if header.routing is not None else []
        return [*_tagged(header.load, READ), *_tagged(header.persist, OVERWRITE),
                *_tagged([*header.keys, *routing], ROUTE_ONLY), *(key for op in header.ops for key in _op_keys(op))]

    find.__doc__ = f"{kind.name}: LOAD, PERSIST, KEYS and ROUTING keys, then each op's model or script key."
    return _parsed(find)


dagexecute_keys = _dag_keys(DAGEXECUTE)
dagexecute_ro_keys = _dag_keys(DAGEXECUTE_RO)
dagrun_keys = _dag_keys(DAGRUN)
dagrun_ro_keys = _dag_keys(DAGRUN_RO)
