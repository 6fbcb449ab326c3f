"""TorchScript scripts: compiled from source, run on a device worker, able to call Redis and run models.

As in RedisAI 1.2.7, a script is TorchScript source with top-level ``def`` functions, compiled with a
``torch.jit.CompilationUnit`` whose resolution callback maps ``torch``, ``redis`` and ``redisAI`` (any case, as
RedisAI's resolver does) to torch, ``torch.ops.redis`` and ``torch.ops.redisAI``. Those two namespaces hold
three operators defined here with Python kernels, registered once when this module is first imported:

* ``redis::execute(str cmd, str[] args) -> Any`` — TorchScript packs trailing strings into ``args``, so both
  ``redis.execute("SET", k, v)`` and ``redis.execute("SET", [k, v])`` work. It is defined with
  ``alias_analysis="CONSERVATIVE"``: with the default, TorchScript drops calls whose result is unused (a SET
  would never happen). Replies become ``None``, ``str``, ``int`` (64-bit, where RedisAI truncates to 32) or, for
  arrays, a tuple — a Python kernel cannot hand TorchScript an ``Any`` holding a heterogeneous or empty list,
  so scripts turn arrays into ``List[Any]`` with ``redis.asList(x)``, exactly as RedisAI scripts do.
* ``redis::asList(Any x) -> Any[]``.
* ``redisAI::model_execute(str key, Tensor[] inputs, int n_outputs) -> Tensor[]`` — runs the model inline on
  the script's worker thread: no queue, no batching, no AI.INFO statistics, as in RedisAI.

The kernels are process-global but the store and the models belong to one server, so each run hands them a
``ScriptHost`` through ``_BINDING``, a ``threading.local`` set by ``CompiledScript.run`` (which ``ScriptWork``
calls) around the function call, on the worker thread that runs it. This is the project's one module-level
mutable object: torch gives a kernel no other way to learn which server (event loop, keyspace) it serves,
and a thread-local keeps concurrent runs on different workers and servers apart.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from backends import errors as msgs
from backends.base import LoadedModel
from backends.device import Device
from backends.errors import AIError, one_line
from backends.script_ops import refused_ops
from backends.tensor import Tensor
from backends.torch_backend import torch_device
from backends.torch_threads import use_intra_op_threads


class ScriptHost(Protocol):
    """What a running script may reach beyond its tensors; called on the worker thread."""

    def call(self, argv: list[bytes]) -> Any:
        """Run one command against database 0 (as RedisAI's scripts do); the reply value (an ``AIError`` value
        for an error reply). Raises ``AIError`` only when the command could not be run at all."""
        ...

    def model(self, key: bytes) -> LoadedModel:
        """The loaded model stored under ``key`` in database 0; ``AIError`` when missing or not a model."""
        ...


_BINDING = threading.local()  # .host: ScriptHost | None, .error: str | None, .stop: Event | None — see the docstring


def _fail(message: str) -> RuntimeError:
    """Remember the clean text for the reply: TorchScript wraps whatever a kernel raises in its traceback."""
    _BINDING.error = message
    return RuntimeError(message)


def _host() -> ScriptHost:
    host: ScriptHost | None = getattr(_BINDING, "host", None)
    if host is None:
        raise _fail(msgs.SCRIPT_CALL_OUTSIDE_RUN_MSG)
    stop: threading.Event | None = getattr(_BINDING, "stop", None)
    if stop is not None and stop.is_set():  # the run timed out and was given up: end the script here
        raise _fail(msgs.SCRIPT_RUN_ABANDONED_MSG)
    return host


def _c_string(text: str) -> bytes:
    """RedisAI passes script strings as C strings: bytes after an embedded NUL are lost."""
    return text.encode().split(b"\0", 1)[0]


def _c_text(raw: bytes) -> str:
    """KEYS and ARGS reach the script as C strings too. TorchScript strings are UTF-8 text: other bytes are
    refused rather than silently turned into another key name."""
    try:
        return raw.split(b"\0", 1)[0].decode()
    except UnicodeDecodeError:
        raise AIError(msgs.SCRIPT_NON_UTF8_MSG) from None


def _call_error(message: str) -> str:
    """A store error as ``redis.execute`` reports it; arity and unknown-command errors are refused by RedisAI's
    RM_Call itself and come out as strerror(EINVAL) / strerror(ENOENT)."""
    if message.startswith(msgs.STORE_WRONG_ARITY_PREFIX):
        message = msgs.REDIS_CALL_EINVAL
    elif message.startswith(msgs.STORE_UNKNOWN_COMMAND_PREFIX):
        message = msgs.REDIS_CALL_ENOENT
    return msgs.REDIS_CALL_ERROR_FMT.format(detail=message)


def script_value(reply: Any) -> Any:
    """A store reply as a TorchScript value (nil → None, bulk or status → str, an array or map → a flat tuple);
    an error reply raises."""
    if reply is None or isinstance(reply, (int, str)):
        return reply
    if isinstance(reply, AIError):
        raise _fail(_call_error(reply.message))
    if isinstance(reply, (bytes, bytearray, memoryview)):
        return bytes(reply).decode(errors="replace")
    if isinstance(reply, (list, tuple, set)):
        return tuple(script_value(item) for item in reply)
    if isinstance(reply, dict):
        return tuple(script_value(item) for pair in reply.items() for item in pair)
    text = getattr(reply, "text", None)  # a simple-string reply from the embedded store
    return text if isinstance(text, str) else str(reply)


def _redis_execute(cmd: str, args: list[str]) -> Any:
    host = _host()
    try:
        reply = host.call([_c_string(cmd), *(_c_string(arg) for arg in args)])
    except AIError as exc:
        raise _fail(exc.message) from exc
    return script_value(reply)


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    kind = {str: "String", int: "Int", float: "Double", type(None): "None"}.get(type(value), type(value).__name__)
    raise _fail(f"Expected GenericList but got {kind}")


def _model_execute(key: str, inputs: list[torch.Tensor], n_outputs: int) -> list[torch.Tensor]:
    host = _host()
    try:
        model = host.model(key.encode())
        outputs = model.run([t.detach().cpu().contiguous().numpy() for t in inputs])
    except AIError as exc:
        raise _fail(exc.message) from exc
    except Exception as exc:
        raise _fail(one_line(exc)) from exc
    if len(outputs) != n_outputs:
        raise _fail(msgs.MODEL_OUTPUT_COUNT_MSG)
    return [torch.from_numpy(output) for output in outputs]


def _register_operators() -> tuple[Any, ...]:
    """Define the operators (once per process, at import). torch unregisters them when their Library object
    is collected, so the module keeps the handles (``_LIBRARIES``; never changed afterwards)."""
    library: Any = torch.library  # untyped in torch's stubs
    redis_lib, redisai_lib = library.Library("redis", "DEF"), library.Library("redisAI", "DEF")
    redis_lib.define("execute(str cmd, str[] args) -> Any", alias_analysis="CONSERVATIVE")
    redis_lib.define("asList(Any x) -> Any[]", alias_analysis="CONSERVATIVE")
    redisai_lib.define("model_execute(str key, Tensor[] inputs, int n_outputs) -> Tensor[]",
                       alias_analysis="CONSERVATIVE")
    redis_lib.impl("execute", _redis_execute, "CompositeExplicitAutograd")
    redis_lib.impl("asList", _as_list, "CompositeExplicitAutograd")
    redisai_lib.impl("model_execute", _model_execute, "CompositeExplicitAutograd")
    return redis_lib, redisai_lib


_LIBRARIES = _register_operators()


# --- compiling ----------------------------------------------------------------------------------------------------


def _resolve(name: str) -> Any:
    """RedisAI's resolver: ``torch``, ``redis`` and ``redisAI``, case-insensitively; nothing else."""
    lowered = name.lower()
    if lowered == "torch":
        return torch
    if lowered == "redis":
        return torch.ops.redis
    if lowered == "redisai":
        return torch.ops.redisAI
    return None


def _find_function(unit: Any, name: str) -> Any:
    """The compiled function ``name``, or None. An empty name is "no such function": torch itself would raise
    its internal ``Expected !name.empty()``."""
    return unit.find_function(name) if name else None


def _check_entry_point(unit: Any, name: str) -> None:
    """An entry point must exist and take exactly (List[Tensor], List[str], List[str])."""
    function = _find_function(unit, name)
    if function is None:
        raise AIError(msgs.ENTRY_POINT_MISSING_FMT.format(fn=name))
    arguments = function.schema.arguments
    if len(arguments) != 3:
        raise AIError(msgs.ENTRY_POINT_ARITY_FMT.format(fn=name, n=len(arguments)))
    expected = [torch.ListType.ofTensors(), torch.ListType.ofStrings(), torch.ListType.ofStrings()]
    if [argument.type for argument in arguments] != expected:
        raise AIError(msgs.ENTRY_POINT_TYPES_FMT.format(fn=name))


def compile_script(source: bytes, device: Device, entry_points: Sequence[str], intra_op_threads: int = 1,
                   allow_ops: frozenset[str] = frozenset()) -> CompiledScript:
    """Compile ``source`` for ``device``, check it uses only allowed ops (backends/script_ops.py, plus
    ``allow_ops``) and check its entry points (AI.SCRIPTSTORE steps 9-10).

    Errors carry TorchScript's own text on one line, without ``ERR``, as RedisAI answers them.
    """
    unit = torch.jit.CompilationUnit()
    try:
        unit.define(source.decode(errors="replace"), rcb=_resolve)
    except Exception as exc:
        raise AIError(one_line(exc)) from exc
    refused = refused_ops(unit.get_functions(), allow_ops)
    if refused:
        raise AIError(msgs.SCRIPT_FORBIDDEN_OPS_FMT.format(ops=", ".join(refused)))
    target = torch_device(device)
    for name in entry_points:
        _check_entry_point(unit, name)
    return CompiledScript(unit, target, intra_op_threads)


# --- running ------------------------------------------------------------------------------------------------------


def _positional(function: Any, name: str, tensors: list[torch.Tensor]) -> list[Any]:
    """RedisAI's "best effort" binding, for a function that is not an entry point: Tensor parameters take
    one tensor each, a List[Tensor] parameter takes all the rest; surplus tensors are dropped."""
    arguments = function.schema.arguments
    if len(arguments) > len(tensors):
        raise AIError(msgs.FUNCTION_TOO_FEW_INPUTS_FMT.format(fn=name))
    values: list[Any] = []
    for position, argument in enumerate(arguments):
        if argument.type == torch.TensorType.get():
            values.append(tensors[position])
        elif argument.type == torch.ListType.ofTensors():
            values.append(tensors[position:])
            break
        else:
            raise AIError(msgs.FUNCTION_INPUT_TYPE_FMT.format(fn=name))
    return values


def _flatten(result: Any, name: str, n_outputs: int) -> list[torch.Tensor]:
    """As RedisAI does: with no OUTPUTS the result is ignored; else a Tensor, a List[Tensor] or a tuple of Tensors."""
    if n_outputs == 0:
        return []
    if isinstance(result, torch.Tensor):
        tensors = [result]
    elif isinstance(result, (list, tuple)) and all(isinstance(item, torch.Tensor) for item in result):
        tensors = list(result)
    else:
        raise AIError(msgs.FUNCTION_NON_TENSOR_FMT.format(fn=name))
    if len(tensors) != n_outputs:
        raise AIError(msgs.FUNCTION_OUTPUT_COUNT_FMT.format(fn=name))
    return tensors


class CompiledScript:
    """A compiled script for one device. Its functions may run on several worker threads at once."""

    def __init__(self, unit: Any, device: torch.device, intra_op_threads: int = 1) -> None:
        self._unit = unit
        self.device = device
        self._intra_op_threads = intra_op_threads

    def has_function(self, name: str) -> bool:
        return _find_function(self._unit, name) is not None

    def _to_device(self, tensor: Tensor) -> torch.Tensor:
        """Inputs decoded from the store are read-only views of its bytes: a script that works in place gets
        its own copy, so store-owned memory stays immutable."""
        value = tensor.to_torch(copy=not tensor.array.flags.writeable)
        return value if self.device.type == "cpu" else value.to(self.device)

    def run(self, function: str, inputs: Sequence[Tensor], *, entry_point: bool, keys: Sequence[bytes] = (),
            args: Sequence[bytes] = (), n_outputs: int, host: ScriptHost | None = None,
            stop: threading.Event | None = None) -> list[Tensor]:
        """Call ``function`` (entry-point convention when ``entry_point``, else positional) with ``host`` bound
        for its redis/redisAI calls; the flattened outputs, on the CPU. Errors are ``AIError``s. Once ``stop`` is
        set, the script's next redis/redisAI call raises (a run given up by the watchdog, dag/watchdog.py)."""
        compiled = _find_function(self._unit, function)
        if compiled is None:
            raise AIError(msgs.FUNCTION_MISSING_FMT.format(fn=function))
        use_intra_op_threads(self._intra_op_threads)  # on this worker thread (backends/torch_threads.py)
        tensors = [self._to_device(tensor) for tensor in inputs]
        if entry_point:
            call_args: list[Any] = [tensors, [_c_text(raw) for raw in keys], [_c_text(raw) for raw in args]]
        else:
            call_args = _positional(compiled, function, tensors)
        _BINDING.host, _BINDING.error, _BINDING.stop = host, None, stop
        try:
            with torch.inference_mode():
                result = compiled(*call_args)
        except Exception as exc:
            raise AIError(_BINDING.error or one_line(exc)) from exc
        finally:
            _BINDING.host = _BINDING.error = _BINDING.stop = None
        return [Tensor.from_torch(output) for output in _flatten(result, function, n_outputs)]
