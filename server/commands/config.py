"""AI.CONFIG: RedisAI's run-time settings, and two of our own.

    AI.CONFIG BACKENDSPATH <path>
    AI.CONFIG LOADBACKEND <TF|TFLITE|TORCH|ONNX> <path>
    AI.CONFIG MODEL_CHUNK_SIZE <bytes>
    AI.CONFIG SCRIPT_EXECUTION_TIMEOUT <ms>   (ours)
    AI.CONFIG PRELOAD <pattern>               (ours)
    AI.CONFIG GET <name>

Grammar, replies and error texts are RedisAI 1.2.7's. THREADS_PER_QUEUE, INTER_OP_PARALLELISM,
INTRA_OP_PARALLELISM, MODEL_EXECUTION_TIMEOUT and BACKEND_MEMORY_LIMIT are load-time settings (command-line
flags, environment, config file): setting them here is ``ERR unsupported subcommand``, as in RedisAI. Our
extensions: ``AI.CONFIG GET`` answers their values, where RedisAI answers null; SCRIPT_EXECUTION_TIMEOUT (the
longest a script op may run before it is answered TIMEDOUT and its worker abandoned, dag/watchdog.py; 0 = no
limit) is set at start by ``--script-execution-timeout`` and can be changed here. PRELOAD loads the stored
models and scripts whose keys match a glob into this process now, as ``--preload`` does at start
(server/ops/preload.py), and answers once they are loaded: ``["loaded", n, "failed", [key, error, ...]]``.

LOADBACKEND loads our backend of that name (TF, TFLITE, TORCH, ONNX) through the backend registry; the path
is accepted and ignored, since our backends are Python packages, not shared objects. A runtime that is not
installed (the ``[tf]``/``[tflite]`` extras are optional) and a backend that is already loaded (also by an
earlier MODELSTORE) answer ``ERR error loading backend``, as RedisAI does when a backend is loaded twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from backends.registry import BACKEND_IMPORTS, BackendRegistry, parse_backend
from server.ai.state import AIState
from server.ops.preload import Preload, run_preload
from server.protocol.reply import OK, Status
from server.protocol.request import parse_strict_int

if TYPE_CHECKING:
    from server.commands.context import Client
    from server.store.keyspace import Keyspace


@dataclass(frozen=True, slots=True)
class ConfigRequest:
    """One parsed AI.CONFIG call."""

    action: str  # LOADBACKEND | BACKENDSPATH | MODEL_CHUNK_SIZE | SCRIPT_EXECUTION_TIMEOUT | PRELOAD | GET
    name: str = ""  # the backend (LOADBACKEND) or the parameter (GET), upper case
    path: bytes = b""  # BACKENDSPATH's value, LOADBACKEND's path, PRELOAD's pattern
    chunk_size: int = 0  # MODEL_CHUNK_SIZE's bytes, SCRIPT_EXECUTION_TIMEOUT's milliseconds


def parse_config(argv: list[bytes]) -> ConfigRequest:
    """Pure parse of ``AI.CONFIG ...``; arguments after the ones a subcommand needs are ignored (as RedisAI)."""
    if len(argv) < 2:
        raise wrong_arity(argv[0].decode(errors="replace"))
    sub = argv[1].upper()
    if sub == b"LOADBACKEND":
        if len(argv) < 4:
            raise wrong_arity(argv[0].decode(errors="replace"))
        return ConfigRequest("LOADBACKEND", name=parse_backend(argv[2]), path=argv[3])
    if sub == b"PRELOAD":
        if len(argv) < 3:
            raise wrong_arity(argv[0].decode(errors="replace"))
        return ConfigRequest("PRELOAD", path=argv[2])
    if sub == b"BACKENDSPATH":
        if len(argv) < 3:
            raise AIError(msgs.CONFIG_BACKENDSPATH_MISSING_MSG)
        return ConfigRequest("BACKENDSPATH", path=argv[2])
    if sub in (b"MODEL_CHUNK_SIZE", b"SCRIPT_EXECUTION_TIMEOUT"):
        return _parse_number_setting(sub.decode(), argv)
    if sub == b"GET":
        if len(argv) < 3:
            raise wrong_arity(argv[0].decode(errors="replace"))
        return ConfigRequest("GET", name=argv[2].decode(errors="replace").upper())
    raise AIError(msgs.CONFIG_UNSUPPORTED_SUBCOMMAND_MSG)


def _parse_number_setting(name: str, argv: list[bytes]) -> ConfigRequest:
    """MODEL_CHUNK_SIZE <bytes> (RedisAI's errors) or SCRIPT_EXECUTION_TIMEOUT <ms> (ours)."""
    value = parse_strict_int(argv[2]) if len(argv) > 2 else None
    if name == "MODEL_CHUNK_SIZE":
        if len(argv) < 3:
            raise AIError(msgs.CONFIG_CHUNK_SIZE_MISSING_MSG)
        if value is None or value <= 0:
            raise AIError(msgs.CONFIG_CHUNK_SIZE_INVALID_MSG)
    elif value is None or value < 0:
        raise AIError(msgs.CONFIG_SCRIPT_TIMEOUT_INVALID_MSG)
    return ConfigRequest(name, chunk_size=value)


def cmd_config(client: Client, argv: list[bytes]) -> Any:
    """AI.CONFIG BACKENDSPATH path | LOADBACKEND backend path | MODEL_CHUNK_SIZE bytes | SCRIPT_EXECUTION_TIMEOUT ms
    | PRELOAD pattern | GET name"""
    req = parse_config(argv)
    ai = client.ctx.ai
    if req.action == "LOADBACKEND":
        return load_backend(ai.backends, req.name)
    if req.action == "PRELOAD":
        return preload_now(ai, client.keyspace(), req.path)
    return apply_config(ai, req)


async def preload_now(ai: AIState, keyspace: Keyspace, pattern: bytes) -> list[Any]:
    """AI.CONFIG PRELOAD pattern: load the matching stored models and scripts into this process, then say how
    many loaded and which failed (with their errors), so a deploy step can wait for a warm process."""
    done = await run_preload(ai, keyspace, Preload(pattern.decode("utf-8", errors="surrogateescape")))
    failed: list[Any] = []
    for key, error in done.failed.items():
        failed += [key, error]
    return [b"loaded", done.loaded, b"failed", failed]


def apply_config(ai: AIState, req: ConfigRequest) -> Any:
    """Every AI.CONFIG but LOADBACKEND, which imports a runtime off the loop: set a value, or get one."""
    if req.action == "BACKENDSPATH":
        ai.settings.backends_path = os.fsdecode(req.path)
        return OK
    if req.action == "MODEL_CHUNK_SIZE":
        ai.settings.model_chunk_size = req.chunk_size
        return OK
    if req.action == "SCRIPT_EXECUTION_TIMEOUT":
        ai.queues.watchdog.script_limit_ms = req.chunk_size
        return OK
    return config_value(ai, req.name)


async def load_backend(backends: BackendRegistry, name: str) -> Status:
    """Import the backend off the event loop (importing torch takes seconds)."""
    if name not in BACKEND_IMPORTS:
        raise AIError(msgs.CONFIG_LOAD_BACKEND_FAILED_MSG)
    try:
        loaded = await asyncio.to_thread(backends.load_new, name)
    except AIError as exc:
        raise AIError(msgs.CONFIG_LOAD_BACKEND_FAILED_MSG) from exc
    if not loaded:
        raise AIError(msgs.CONFIG_LOAD_BACKEND_FAILED_MSG)
    return OK


_GETTERS: Mapping[str, Callable[[AIState], Any]] = MappingProxyType({
    "BACKENDSPATH": lambda ai: os.fsencode(ai.settings.backends_path),
    "MODEL_CHUNK_SIZE": lambda ai: ai.settings.model_chunk_size,
    # Ours: RedisAI answers null for the load-time parameters.
    "THREADS_PER_QUEUE": lambda ai: ai.queues.threads_per_queue,
    "INTER_OP_PARALLELISM": lambda ai: ai.settings.inter_op_threads,
    "INTRA_OP_PARALLELISM": lambda ai: ai.settings.intra_op_threads,
    "MODEL_EXECUTION_TIMEOUT": lambda ai: ai.settings.execution_timeout_ms,
    "BACKEND_MEMORY_LIMIT": lambda ai: ai.settings.backend_memory_limit,
    "SCRIPT_EXECUTION_TIMEOUT": lambda ai: ai.queues.watchdog.script_limit_ms,
})


def config_value(ai: AIState, name: str) -> Any:
    """AI.CONFIG GET: a bulk string for BACKENDSPATH, integers for the rest, null for any other name."""
    getter = _GETTERS.get(name)
    return None if getter is None else getter(ai)
