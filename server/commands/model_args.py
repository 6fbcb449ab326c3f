"""Pure parsers of the model commands, deprecated MODELSET/MODELRUN included (no store access).

Checks run in RedisAI's order; the first failing check wins. Where RedisAI interleaves a keyspace lookup
(MODELEXECUTE looks the model up before parsing INPUTS), the caller passes what the lookup found.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from backends import errors as msgs
from backends.device import Device, parse_device, parse_device_lenient
from backends.errors import AIError, parse_strict_int, wrong_arity
from backends.objects import ModelMeta, model_digest
from backends.registry import parse_backend
from dag.parse import parse_timeout
from server.commands.args import ArgCursor, final_timeout, parse_ac_uint


@dataclass(frozen=True, slots=True)
class ModelStoreRequest(ModelMeta):
    """AI.MODELSTORE / AI.MODELSET, parsed: the model's metadata as it will be stored (``digest`` is the
    blob's), plus the key and the blob (so the metadata fields are written once, in ModelMeta)."""

    key: bytes
    blob: bytes

    def meta(self) -> ModelMeta:
        """The metadata alone, as the store and the model cache hold it (no key, no blob)."""
        return ModelMeta(**{f.name: getattr(self, f.name) for f in fields(ModelMeta)})


class ModelExecuteRequest:
    """AI.MODELEXECUTE / AI.MODELRUN, parsed against the model's input and output counts. Immutable; a plain
    class (one a request) so that mypyc compiles its ``__init__``."""

    __slots__ = ("inputs", "key", "outputs", "timeout_ms")

    def __init__(self, key: bytes, inputs: tuple[bytes, ...], outputs: tuple[bytes, ...],
                 timeout_ms: int | None) -> None:
        self.key: Final = key
        self.inputs: Final = inputs
        self.outputs: Final = outputs
        self.timeout_ms: Final = timeout_ms


@dataclass(frozen=True, slots=True)
class _Batching:
    batchsize: int = 0
    minbatchsize: int = 0
    minbatchtimeout: int = 0


def _store_request(key: bytes, backend: str, device: Device, tag: bytes, batching: _Batching,
                   names: tuple[tuple[str, ...], tuple[str, ...]], blob: bytes) -> ModelStoreRequest:
    """What MODELSTORE and MODELSET parsed, as one request (the blob's digest taken here, once)."""
    digest = model_digest(blob, backend, *names)
    return ModelStoreRequest(backend, device, tag, batching.batchsize, batching.minbatchsize,
                             batching.minbatchtimeout, names[0], names[1], digest, key, blob)


def _uint_or(raw: bytes | None, message: str) -> int:
    value = parse_ac_uint(raw) if raw is not None else None
    if value is None:
        raise AIError(message)
    return value


def _parse_batching(cursor: ArgCursor) -> _Batching:
    """``[BATCHSIZE n] [MINBATCHSIZE m] [MINBATCHTIMEOUT t]``, each optional, in this order, as MODELSTORE checks."""
    batch = minbatch = timeout = 0
    if cursor.match(b"BATCHSIZE"):
        batch = _uint_or(cursor.next() if cursor.left else None, msgs.INVALID_BATCHSIZE_MSG)
    if cursor.match(b"MINBATCHSIZE"):
        minbatch = _uint_or(cursor.next() if cursor.left else None, msgs.INVALID_MINBATCHSIZE_MSG)
        if batch == 0 and minbatch > 0:
            raise AIError(msgs.MINBATCHSIZE_WITHOUT_BATCHSIZE_MSG)
    if cursor.match(b"MINBATCHTIMEOUT"):
        timeout = _uint_or(cursor.next() if cursor.left else None, msgs.INVALID_MINBATCHTIMEOUT_MSG)
        if minbatch == 0 and timeout > 0:
            raise AIError(msgs.MINBATCHTIMEOUT_WITHOUT_MINBATCHSIZE_MSG)
    return _Batching(batch, minbatch, timeout)


def _names(values: list[bytes]) -> tuple[str, ...]:
    return tuple(v.decode(errors="replace") for v in values)


def _parse_tf_io(cursor: ArgCursor) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """TF only: ``INPUTS n name... OUTPUTS m name...``; leaves the cursor on the token after them."""
    if not cursor.match(b"INPUTS"):
        raise AIError(msgs.TF_INPUTS_MISSING_MSG)
    count = parse_ac_uint(cursor.next()) if cursor.left else None
    if not count:
        raise AIError(msgs.INVALID_INPUT_COUNT_MSG)
    if cursor.left < count:
        raise AIError(msgs.MODEL_INPUTS_MISMATCH_ARGS_MSG)
    inputs = _names(cursor.take(count))
    if not cursor.match(b"OUTPUTS"):
        raise AIError(msgs.TF_OUTPUTS_MISSING_MSG)
    count = parse_ac_uint(cursor.next()) if cursor.left else None
    if not count:
        raise AIError(msgs.INVALID_OUTPUT_COUNT_MSG)
    if cursor.left < count:
        raise AIError(msgs.MODEL_OUTPUTS_MISMATCH_ARGS_MSG)
    return inputs, _names(cursor.take(count))


def parse_modelstore(argv: list[bytes]) -> ModelStoreRequest:
    """AI.MODELSTORE key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m [MINBATCHTIMEOUT t]]]
    [INPUTS n name... OUTPUTS m name...] BLOB chunk..."""
    if len(argv) < 6:
        raise wrong_arity(argv[0].decode(errors="replace"))
    backend = parse_backend(argv[2])
    device = parse_device(argv[3])
    cursor = ArgCursor(argv, 4)
    tag = cursor.next() if cursor.match(b"TAG") and cursor.left else b""
    batching = _parse_batching(cursor)
    if not cursor.left:
        raise AIError(msgs.MISSING_BLOB_MSG)
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    if backend == "TF":
        inputs, outputs = _parse_tf_io(cursor)
    elif (cursor.peek() or b"").upper() == b"INPUTS":
        raise AIError(msgs.INPUTS_NOT_FOR_BACKEND_MSG)
    if not cursor.match(b"BLOB"):
        raise AIError(msgs.EXPECTED_BLOB_MSG)
    if not cursor.left:
        raise AIError(msgs.MISSING_BLOB_MSG)
    return _store_request(argv[1], backend, device, tag, batching, (inputs, outputs), b"".join(cursor.rest()))


_MODELSET_KEYWORDS: Final = (b"INPUTS", b"OUTPUTS", b"TAG", b"BATCHSIZE", b"MINBATCHSIZE", b"MINBATCHTIMEOUT", b"BLOB")


def _parse_modelset_batching(cursor: ArgCursor, backend: str) -> _Batching:
    """The deprecated MODELSET's checks: the "without" errors come before the values are read."""
    batch = minbatch = timeout = 0
    if cursor.match(b"BATCHSIZE"):
        if backend == "TFLITE":
            raise AIError(msgs.TFLITE_NO_BATCHING_MSG)
        batch = _uint_or(cursor.next() if cursor.left else None, msgs.INVALID_BATCHSIZE_MSG)
    if cursor.match(b"MINBATCHSIZE"):
        if batch == 0:
            raise AIError(msgs.MINBATCHSIZE_WITHOUT_BATCHSIZE_MSG)
        minbatch = _uint_or(cursor.next() if cursor.left else None, msgs.INVALID_MINBATCHSIZE_MSG)
    if cursor.match(b"MINBATCHTIMEOUT"):
        if batch == 0:
            raise AIError(msgs.MINBATCHTIMEOUT_WITHOUT_BATCHSIZE_MSG)
        if minbatch == 0:
            raise AIError(msgs.MINBATCHTIMEOUT_WITHOUT_MINBATCHSIZE_MSG)
        timeout = _uint_or(cursor.next() if cursor.left else None, msgs.INVALID_MINBATCHTIMEOUT_MSG)
    return _Batching(batch, minbatch, timeout)


def _split_modelset_io(options: list[bytes], backend: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if backend != "TF":
        return (), ()  # non-TF: stray options are silently ignored, as 1.2.7 does
    if not options:
        raise AIError(msgs.TF_NO_INPUTS_OUTPUTS_MSG)
    if options[0].upper() != b"INPUTS":
        raise AIError(msgs.INPUTS_NOT_SPECIFIED_MSG)
    upper = [o.upper() for o in options]
    if b"OUTPUTS" not in upper:
        raise AIError(msgs.OUTPUTS_NOT_SPECIFIED_MSG)
    split = upper.index(b"OUTPUTS")
    return _names(options[1:split]), _names(options[split + 1 :])


def parse_modelset(argv: list[bytes]) -> ModelStoreRequest:
    """AI.MODELSET key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m [MINBATCHTIMEOUT t]]]
    [INPUTS name... OUTPUTS name...] BLOB chunk...   (deprecated, 1.0-era form)"""
    if len(argv) < 4:
        raise wrong_arity(argv[0].decode(errors="replace"))
    backend = parse_backend(argv[2])
    if len(argv[3]) > 10 or argv[3].upper() in _MODELSET_KEYWORDS:
        raise AIError(msgs.INVALID_DEVICE_MSG)
    device = parse_device_lenient(argv[3])
    cursor = ArgCursor(argv, 4)
    tag = cursor.next() if cursor.match(b"TAG") and cursor.left else b""
    batching = _parse_modelset_batching(cursor, backend)
    if not cursor.left:
        raise AIError(msgs.MISSING_BLOB_MSG)
    rest = cursor.rest()
    upper = [r.upper() for r in rest]
    blob_at = upper.index(b"BLOB") if b"BLOB" in upper else len(rest)
    inputs, outputs = _split_modelset_io(rest[:blob_at], backend)
    chunks = rest[blob_at + 1 :]
    if not chunks:
        raise AIError(msgs.MISSING_BLOB_MSG)
    return _store_request(argv[1], backend, device, tag, batching, (inputs, outputs), b"".join(chunks))


def _keys(cursor: ArgCursor, count_msg: str, positive_msg: str, expected: int, mismatch_msg: str,
          missing_fmt: str) -> tuple[bytes, ...]:
    """``n key...``; ``missing_fmt`` (its ``{cmd}`` filled) only formatted when keys are missing."""
    count = parse_strict_int(cursor.next()) if cursor.left else None
    if count is None:
        raise AIError(count_msg)
    if count <= 0:
        raise AIError(positive_msg)
    if count != expected:
        raise AIError(mismatch_msg)
    if cursor.left < count:
        raise AIError(missing_fmt.format(cmd="AI.MODELEXECUTE"))
    return tuple(cursor.take(count))


def parse_timeout_clause(cursor: ArgCursor) -> int | None:
    """An optional trailing ``TIMEOUT ms``; anything else is ``Invalid argument: <token>``."""
    if not cursor.left:
        return None
    token = cursor.next()
    if token.upper() != b"TIMEOUT":
        raise AIError(msgs.INVALID_ARGUMENT_FMT.format(arg=token.decode(errors="replace")))
    return final_timeout(cursor, msgs.NO_TIMEOUT_VALUE_MSG, msgs.INVALID_ARGUMENT_FMT)


def check_modelexecute_arity(argv: list[bytes]) -> None:
    if len(argv) < 8:
        raise AIError(msgs.MODELEXECUTE_ARITY_MSG)


def parse_modelexecute(argv: list[bytes], n_inputs: int, n_outputs: int) -> ModelExecuteRequest:
    """AI.MODELEXECUTE key INPUTS n key... OUTPUTS m key... [TIMEOUT ms] (after the model lookup)."""
    cursor = ArgCursor(argv, 2)
    if not cursor.match(b"INPUTS"):
        raise AIError(msgs.INPUTS_NOT_SPECIFIED_MSG)
    inputs = _keys(cursor, msgs.INVALID_INPUT_COUNT_MSG, msgs.INPUT_COUNT_POSITIVE_MSG, n_inputs,
                   msgs.INPUTS_COUNT_MISMATCH_MSG, msgs.INPUT_KEYS_MISMATCH_FMT)
    if not cursor.match(b"OUTPUTS"):
        raise AIError(msgs.OUTPUTS_NOT_SPECIFIED_MSG)
    outputs = _keys(cursor, msgs.INVALID_OUTPUT_COUNT_MSG, msgs.OUTPUT_COUNT_POSITIVE_MSG, n_outputs,
                    msgs.OUTPUTS_COUNT_MISMATCH_MSG, msgs.OUTPUT_KEYS_MISMATCH_FMT)
    return ModelExecuteRequest(argv[1], inputs, outputs, parse_timeout_clause(cursor))


def input_keys_hint(argv: list[bytes]) -> list[bytes]:
    """The input keys a MODELEXECUTE/MODELRUN names, read leniently, to prefetch them with the model."""
    return io_keys_hint(argv)[0]


def output_keys_hint(argv: list[bytes]) -> list[bytes]:
    """The output keys a MODELEXECUTE/MODELRUN names, read leniently, to check their types up front."""
    return io_keys_hint(argv)[1]


def io_keys_hint(argv: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """Both hints, in one pass over argv (each request asks for both): the first INPUTS, the first OUTPUTS
    after it, any case."""
    counted = _is_keyword(argv[0], b"AI.MODELEXECUTE")
    inputs = _position(argv, b"INPUTS", 0)
    outputs = _position(argv, b"OUTPUTS", inputs)
    return (_hinted(argv, inputs + 1, outputs, counted) if inputs < len(argv) else [],
            _hinted(argv, outputs + 1, len(argv), counted) if outputs < len(argv) else [])


def _position(argv: list[bytes], keyword: bytes, start: int) -> int:
    """Where ``keyword`` (upper case) is first, from ``start`` on; ``len(argv)`` when nowhere."""
    for at in range(start, len(argv)):
        if _is_keyword(argv[at], keyword):
            return at
    return len(argv)


def _is_keyword(arg: bytes, keyword: bytes) -> bool:
    """``arg`` is ``keyword`` (upper case) in any case; no upper-cased copy unless the lengths agree."""
    return len(arg) == len(keyword) and (arg == keyword or arg.upper() == keyword)


def _hinted(argv: list[bytes], start: int, stop: int, counted: bool) -> list[bytes]:
    """``n key...`` (MODELEXECUTE) or ``key...`` up to ``stop`` (MODELRUN), from ``argv[start]``."""
    if not counted:
        return list(argv[start:stop])
    count = parse_strict_int(argv[start]) if start < len(argv) else None
    return list(argv[start + 1 : start + 1 + count]) if count and count > 0 else []


def check_modelrun_arity(argv: list[bytes]) -> None:
    if len(argv) < 6:
        raise AIError(msgs.MODELRUN_ARITY_MSG)


def parse_modelrun(argv: list[bytes], n_inputs: int, n_outputs: int) -> ModelExecuteRequest:
    """AI.MODELRUN key [TIMEOUT ms] INPUTS key... OUTPUTS key...   (deprecated, after the model lookup)"""
    cursor = ArgCursor(argv, 2)
    timeout = None
    if cursor.match(b"TIMEOUT"):
        timeout = parse_timeout(cursor.next() if cursor.left else None, msgs.INVALID_TIMEOUT_MSG)
    if not cursor.match(b"INPUTS"):
        raise AIError(msgs.INPUTS_NOT_SPECIFIED_MSG)
    rest = cursor.rest()
    upper = [r.upper() for r in rest]
    split = upper.index(b"OUTPUTS") if b"OUTPUTS" in upper else len(rest)
    inputs, outputs = tuple(rest[:split]), tuple(rest[split + 1 :])
    if len(inputs) != n_inputs:
        raise AIError(msgs.INPUTS_COUNT_MISMATCH_MSG)
    if len(outputs) != n_outputs:
        raise AIError(msgs.OUTPUTS_COUNT_MISMATCH_MSG)
    return ModelExecuteRequest(argv[1], inputs, outputs, timeout)


def parse_modelget_flags(argv: list[bytes]) -> tuple[bool, bool]:
    """AI.MODELGET key [META] [BLOB] → (meta, blob); unknown tokens are ignored, as 1.2.7 does."""
    if not 2 <= len(argv) <= 4:
        raise wrong_arity(argv[0].decode(errors="replace"))
    flags = {a.upper() for a in argv[2:]}
    meta, blob = b"META" in flags, b"BLOB" in flags
    if not meta and not blob:
        return True, True
    return meta, blob
