"""Script commands: AI.SCRIPTSTORE/SCRIPTSET, AI.SCRIPTGET, AI.SCRIPTDEL, AI.SCRIPTEXECUTE/SCRIPTRUN, AI._SCRIPTSCAN.

A script is one Redis hash (backends/objects.py) holding its TorchScript source; the compiled form is cached in
the process by (device, source digest) (server/ai/script_cache.py). AI.SCRIPTEXECUTE reads the script's metadata,
the input tensors and the output keys' types in one round trip, runs as a one-op DAG on the script's device
queue, then writes the outputs in one atomic round trip before it replies (the model commands' pattern).

The DAG engine's script ops use ``compiled_script`` (server/ai/stored.py: ``ctx.ai.scripts``, a hit without
the cache's coroutine) and ``script_work`` (server/ai/steps.py), as this module does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError
from backends.objects import (
    SCRIPT_MARKER,
    SCRIPT_META_FIELDS,
    ScriptMeta,
    blob_digest,
    decode_script_meta,
    script_hash_fields,
)
from backends.tensor import Tensor
from server.ai.attempts import Attempt, again_or_raise, attempted
from server.ai.single_op import SingleOp, execute_single_op
from server.ai.state import AIState, RunStats
from server.ai.steps import script_work
from server.ai.stored import ChangedWhileLoading, compiled_script
from server.ai.tensor_io import check_output_types, decode_input, output_type_checks
from server.commands.script_args import (
    ScriptExecuteRequest,
    ScriptStoreRequest,
    check_scriptexecute_arity,
    check_scriptrun_arity,
    parse_scriptexecute,
    parse_scriptget_flags,
    parse_scriptrun,
    parse_scriptset,
    parse_scriptstore,
)
from server.commands.stored import delete_stored, log_stored, scan_stored
from server.protocol.reply import OK
from server.store.atomic import ScriptCall, store_object_call
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from backends.script_backend import CompiledScript
    from server.commands.context import Client

log = logging.getLogger("redisai.script")

ParseExecute = Callable[[list[bytes]], ScriptExecuteRequest]


# --- storing ------------------------------------------------------------------------------------------------------


async def cmd_scriptstore(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTSTORE key device [TAG tag] ENTRY_POINTS n fn... SOURCE src"""
    return await _store(client, parse_scriptstore(argv))


async def cmd_scriptset(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTSET key device [TAG tag] SOURCE src   (deprecated: no entry points)"""
    return await _store(client, parse_scriptset(argv))


async def _store(client: Client, req: ScriptStoreRequest) -> Any:
    """Compile (off the loop: a script that does not compile is its own error), check the key, write, cache.

    As in RedisAI, compile and entry-point errors come before WRONGTYPE.
    """
    write, stored = await prepare_store(client, req)
    await client.keyspace().run_script(*write)
    stored()
    return OK


async def prepare_store(client: Client, req: ScriptStoreRequest) -> tuple[ScriptCall, Callable[[], None]]:
    """Compile (off the loop): the write that stores the script (WRONGTYPE unless the key is free or a script),
    and what to do once it is written (also at EXEC, inside MULTI)."""
    ai = client.ctx.ai
    meta = ScriptMeta(req.device, req.tag, req.entry_points, blob_digest(req.source))
    started = time.perf_counter()
    compiled = await ai.scripts.compile(req.source, req.device, req.entry_points)
    keyspace = client.keyspace()
    write = store_object_call(req.key, keyspace.stats_key(req.key), SCRIPT_MARKER,
                              script_hash_fields(meta, req.source))

    def stored() -> None:
        ai.scripts.put(meta, compiled)
        ai.queues.queue(meta.device.queue_name)
        ai.stats[req.key] = RunStats(req.key, "SCRIPT", "TORCH", meta.device.text, meta.tag)
        client.ctx.metrics.forget(req.key)
        log_stored("script", req.key, "TORCH", meta.device.text, len(req.source), started)

    return write, stored


# --- reading and deleting -----------------------------------------------------------------------------------------


async def script_meta(keyspace: Keyspace, key: bytes, values: Any) -> ScriptMeta:
    """A script's metadata from ``HMGET key *SCRIPT_META_FIELDS``; only when every field is missing does a
    second look tell a missing key (``ERR script key is empty``) from a hash that is not a script (WRONGTYPE)."""
    if isinstance(values, list) and all(value is None for value in values):
        exists = await keyspace.call(b"EXISTS", key)
    else:
        exists = 1
    meta = decode_script_meta(values, exists)
    if meta is None:
        raise AIError(msgs.SCRIPT_KEY_EMPTY_MSG)
    return meta


async def cmd_scriptget(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTGET key [META] [SOURCE]"""
    want_meta, want_source = parse_scriptget_flags(argv)
    keyspace = client.keyspace()
    values = (await keyspace.pipeline([(b"HMGET", argv[1], *SCRIPT_META_FIELDS, b"source")]))[0]
    fields = values[: len(SCRIPT_META_FIELDS)] if isinstance(values, list) else values
    meta = await script_meta(keyspace, argv[1], fields)
    return scriptget_reply(meta, values[-1], want_meta, want_source)


def scriptget_reply(meta: ScriptMeta, source: bytes | None, want_meta: bool, want_source: bool) -> Any:
    """The source, the metadata, or both, as RedisAI lays them out."""
    source = source or b""
    if not want_meta:
        return source
    reply: list[Any] = ["device", meta.device.text, "tag", meta.tag, "Entry Points", list(meta.entry_points)]
    return [*reply, "source", source] if want_source else reply


async def cmd_scriptdel(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTDEL key"""
    return await delete_stored(client, argv, SCRIPT_MARKER, msgs.SCRIPT_KEY_EMPTY_MSG)


async def cmd_scriptscan(client: Client, argv: list[bytes]) -> Any:
    """AI._SCRIPTSCAN"""
    return await scan_stored(client, argv, SCRIPT_MARKER)


# --- executing ----------------------------------------------------------------------------------------------------


async def cmd_scriptexecute(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTEXECUTE key function [KEYS n key...] [INPUTS n key...] [ARGS n arg...] [OUTPUTS m key...]
    [TIMEOUT ms]"""
    check_scriptexecute_arity(argv)
    return await _execute(client, argv, parse_scriptexecute)


async def cmd_scriptrun(client: Client, argv: list[bytes]) -> Any:
    """AI.SCRIPTRUN key function [TIMEOUT ms] [INPUTS key... [$ key...]] [OUTPUTS key...]   (deprecated)"""
    check_scriptrun_arity(argv)
    return await _execute(client, argv, parse_scriptrun)


async def _prefetch(keyspace: Keyspace, argv: list[bytes],
                    parse: ParseExecute) -> tuple[ScriptMeta, ScriptExecuteRequest, list[Tensor]]:
    """One round trip: the script's metadata, the inputs and the output keys' types. Errors come in RedisAI's
    order: the script lookup, then the arguments, then the input tensors, then the outputs' types."""
    try:
        req: ScriptExecuteRequest | None = parse(argv)
        problem: AIError | None = None
    except AIError as exc:
        req, problem = None, exc
    commands: list[tuple[bytes, ...]] = [(b"HMGET", argv[1], *SCRIPT_META_FIELDS)]
    if req is not None:
        commands += [(b"GET", key) for key in req.inputs] + output_type_checks(list(req.outputs))
    replies = await keyspace.pipeline(commands)
    meta = await script_meta(keyspace, argv[1], replies[0])
    if req is None:
        raise problem or AIError(msgs.INTERNAL_MSG.format(detail="parse"))
    fetched = replies[1 : 1 + len(req.inputs)]
    inputs = [decode_input(value) for value in fetched]
    check_output_types(replies[1 + len(req.inputs) :])
    return meta, req, inputs


async def _script_try(ai: AIState, keyspace: Keyspace, argv: list[bytes], parse: ParseExecute,
                      tried: Attempt) -> tuple[ScriptMeta, Any, list[Tensor], CompiledScript]:
    """Read the script and its inputs, and build it (server/ai/attempts.py): stored again between its metadata
    and its source, it is read again as it is now (``LOAD_TRIES`` in all)."""
    meta, req, inputs = await _prefetch(keyspace, argv, parse)
    try:
        compiled = await compiled_script(ai.scripts, meta, keyspace, req.key)
    except ChangedWhileLoading as exc:
        again_or_raise(exc, tried.after_load_change())
    return meta, req, inputs, compiled


async def _execute(client: Client, argv: list[bytes], parse: ParseExecute) -> Any:
    """Read, run, write; RedisAI counts no samples for scripts (AI.INFO shows -1). The script's redis calls
    reach database 0, whatever database the client selected."""
    ai, keyspace = client.ctx.ai, client.keyspace()
    meta, req, inputs, compiled = await attempted(partial(_script_try, ai, keyspace, argv, parse))
    work = script_work(meta, compiled, req, client.ctx.keyspace(0), ai.models)
    op = SingleOp(req.key, meta.device.queue_name, work, inputs, req.outputs, req.timeout_ms)
    return await execute_single_op(ai, keyspace, op)
