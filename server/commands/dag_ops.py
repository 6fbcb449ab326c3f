"""Parsing the ops of a DAG, in order, with the model and script metadata already fetched (pure).

RedisAI looks each op's model or script up while it parses that op, so ``model key is empty`` for the third
op comes after a syntax error in the second. The caller fetches every object the ops name in one round trip
(``objects_named``) and passes the results here; the checks then run exactly in RedisAI's order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from backends.objects import ModelMeta, decode_model_meta, decode_script_meta
from backends.tensor_args import build_tensor, parse_tensorset, tensorget_format
from dag.ops import DagOp, ModelOp, ScriptOp, TensorGetOp, TensorSetOp
from dag.parse import DagKind, op_name
from server.ai.stored import require_model
from server.commands.model_args import (
    check_modelexecute_arity,
    check_modelrun_arity,
    parse_modelexecute,
    parse_modelrun,
)
from server.commands.script_args import (
    check_scriptexecute_arity,
    check_scriptrun_arity,
    parse_scriptexecute,
    parse_scriptrun,
)

MODEL_OPS: Final = (b"AI.MODELEXECUTE", b"AI.MODELRUN")
SCRIPT_OPS: Final = (b"AI.SCRIPTEXECUTE", b"AI.SCRIPTRUN")

# key → (its HMGET reply, its EXISTS reply), fetched before parsing.
ObjectLookup = Mapping[bytes, tuple[Any, Any]]
# decode_model_meta, or the server's remembering form of it (ModelCache.decode_meta, server/ai/state.py)
MetaDecoder = Callable[[Any, Any], ModelMeta | None]


def objects_named(ops: list[list[bytes]]) -> tuple[list[bytes], list[bytes]]:
    """The model keys and script keys the ops name (second argument), to fetch before parsing."""
    models = [op[1] for op in ops if len(op) > 1 and op_name(op) in MODEL_OPS]
    scripts = [op[1] for op in ops if len(op) > 1 and op_name(op) in SCRIPT_OPS]
    return list(dict.fromkeys(models)), list(dict.fromkeys(scripts))


def allowed_in_dag(name: bytes, kind: DagKind) -> None:
    """Which op names each DAG command accepts, with RedisAI's texts for the others."""
    if kind.deprecated:
        if name in (b"AI.MODELEXECUTE", b"AI.SCRIPTEXECUTE"):
            raise AIError(msgs.DAG_NEW_IN_DAGRUN_FMT.format(op=name.decode()))
        if name not in (b"AI.TENSORSET", b"AI.TENSORGET", b"AI.MODELRUN", b"AI.SCRIPTRUN"):
            raise AIError(msgs.DAG_UNSUPPORTED_OP_MSG)
        return
    if name == b"AI.SCRIPTEXECUTE" and kind.read_only:
        raise AIError(msgs.DAG_SCRIPTEXECUTE_RO_MSG)
    if name in (b"AI.MODELRUN", b"AI.SCRIPTRUN"):
        raise AIError(msgs.DAG_DEPRECATED_IN_EXECUTE_FMT.format(op=name.decode()))
    if name not in (b"AI.TENSORSET", b"AI.TENSORGET", b"AI.MODELEXECUTE", b"AI.SCRIPTEXECUTE"):
        raise AIError(msgs.DAG_UNSUPPORTED_OP_MSG)


def _model_meta(key: bytes, models: ObjectLookup, decode: MetaDecoder) -> ModelMeta:
    values, exists = models[key]
    return require_model(decode(values, exists))


def _model_op(argv: list[bytes], models: ObjectLookup, decode: MetaDecoder) -> ModelOp:
    modern = op_name(argv) == b"AI.MODELEXECUTE"
    (check_modelexecute_arity if modern else check_modelrun_arity)(argv)
    meta = _model_meta(argv[1], models, decode)
    parse = parse_modelexecute if modern else parse_modelrun
    req = parse(argv, len(meta.inputs), len(meta.outputs))  # a bad TIMEOUT value is its own error, as in RedisAI
    if req.timeout_ms is not None:
        raise AIError(msgs.DAG_TIMEOUT_IN_OP_MSG)
    return ModelOp(argv[1], meta, req.inputs, req.outputs)


def _script_op(argv: list[bytes], scripts: ObjectLookup) -> ScriptOp:
    modern = op_name(argv) == b"AI.SCRIPTEXECUTE"
    (check_scriptexecute_arity if modern else check_scriptrun_arity)(argv)
    values, exists = scripts[argv[1]]
    meta = decode_script_meta(values, exists)
    if meta is None:
        raise AIError(msgs.SCRIPT_KEY_EMPTY_MSG)
    req = parse_scriptexecute(argv, standalone=False) if modern else parse_scriptrun(argv)
    if req.timeout_ms is not None:
        raise AIError(msgs.DAG_TIMEOUT_IN_OP_MSG)
    return ScriptOp(argv[1], meta, req, req.inputs, req.outputs)


def parse_op(argv: list[bytes], kind: DagKind, models: ObjectLookup, scripts: ObjectLookup,
             decode: MetaDecoder = decode_model_meta) -> DagOp:
    name = op_name(argv)
    allowed_in_dag(name, kind)
    if name == b"AI.TENSORSET":
        request = parse_tensorset(argv)
        return TensorSetOp(request.key, build_tensor(request))
    if name == b"AI.TENSORGET":
        fmt = tensorget_format(argv)  # arity first: argv[1] exists after it
        return TensorGetOp(argv[1], fmt)
    if name in MODEL_OPS:
        return _model_op(argv, models, decode)
    return _script_op(argv, scripts)


def parse_ops(op_argvs: list[list[bytes]], kind: DagKind, models: ObjectLookup,
              scripts: ObjectLookup, decode: MetaDecoder = decode_model_meta) -> list[DagOp]:
    """Every op, in order; the first failure is the whole command's error."""
    return [parse_op(argv, kind, models, scripts, decode) for argv in op_argvs]
