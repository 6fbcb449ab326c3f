"""Model commands: AI.MODELSTORE/MODELSET, AI.MODELGET, AI.MODELDEL, AI.MODELEXECUTE/MODELRUN, AI._MODELSCAN.

A model is one Redis hash (backends/objects.py). AI.MODELEXECUTE reads the model's metadata, its digest
and the input tensors in one round trip, runs as a one-op DAG on the model's device queue, then writes the
outputs in one atomic round trip before it replies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from backends import errors as msgs
from backends.errors import AIError, unavailable
from backends.objects import MODEL_MARKER, MODEL_META_FIELDS, ModelMeta, model_hash_fields
from backends.tensor import Tensor, TensorValue
from dag.execute import ModelWork
from server.ai.attempts import Attempt, again_or_raise, attempted, run_again
from server.ai.single_op import SingleOp, execute_single_op
from server.ai.state import RunStats
from server.ai.steps import batch_spec
from server.ai.stored import ChangedWhileLoading, loaded_model, read_model_meta
from server.ai.tensor_io import DecodedInputs, check_output_types, decode_inputs, output_type_checks
from server.commands.model_args import (
    ModelExecuteRequest,
    ModelStoreRequest,
    check_modelexecute_arity,
    check_modelrun_arity,
    io_keys_hint,
    parse_modelexecute,
    parse_modelget_flags,
    parse_modelrun,
    parse_modelset,
    parse_modelstore,
)
from server.commands.stored import delete_stored, log_stored, scan_stored
from server.protocol.reply import OK
from server.store.atomic import ScriptCall, input_check_value, store_object_call
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from server.commands.context import Client

log: Final = logging.getLogger("redisai.model")

ParseExecute = Callable[[list[bytes], int, int], ModelExecuteRequest]


# --- storing ------------------------------------------------------------------------------------------------------


async def cmd_modelstore(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELSTORE key backend device [TAG tag] [BATCHSIZE n [MINBATCHSIZE m [MINBATCHTIMEOUT t]]]
    [INPUTS n name... OUTPUTS m name...] BLOB chunk..."""
    return await _store(client, parse_modelstore(argv))


async def cmd_modelset(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELSET key backend device [TAG tag] [BATCHSIZE n ...] [INPUTS name... OUTPUTS name...] BLOB chunk..."""
    return await _store(client, parse_modelset(argv))


async def _store(client: Client, req: ModelStoreRequest) -> Any:
    """Build the model, check the key and write it (one store-side step), then cache it."""
    write, stored = await prepare_store(client, req)
    await client.keyspace().run_script(*write)
    stored()
    return OK


async def prepare_store(client: Client, req: ModelStoreRequest) -> tuple[ScriptCall, Callable[[], None]]:
    """Build the model (off the loop: a broken blob is the backend's error): the write that stores it (WRONGTYPE
    unless the key is free or a model), and what to do once it is written (also at EXEC, inside MULTI)."""
    ai = client.ctx.ai
    draft = req.meta()
    started = time.perf_counter()
    loaded = await ai.models.load(draft, req.blob)
    if req.backend != "TF":  # TORCH/ONNX name their inputs and outputs themselves
        draft = replace(draft, inputs=tuple(loaded.input_names), outputs=tuple(loaded.output_names))
    keyspace = client.keyspace()
    write = store_object_call(req.key, keyspace.stats_key(req.key), MODEL_MARKER, model_hash_fields(draft, req.blob))

    def stored() -> None:
        ai.models.put(draft, loaded)
        ai.queues.queue(draft.device.queue_name)
        ai.stats[req.key] = RunStats(req.key, "MODEL", draft.backend, draft.device.text, draft.tag)
        client.ctx.metrics.forget(req.key)  # a re-stored model starts with fresh series, as with AI.INFO
        log_stored("model", req.key, draft.backend, draft.device.text, len(req.blob), started)

    return write, stored


# --- reading and deleting -----------------------------------------------------------------------------------------


async def _read_meta(client: Client, key: bytes, extra: tuple[bytes, ...] = ()) -> tuple[ModelMeta, list[Any]]:
    """The model's metadata and ``extra`` fields (MODELGET's blob) in one HMGET round trip."""
    keyspace = client.keyspace()
    values = (await keyspace.pipeline([(b"HMGET", key, *MODEL_META_FIELDS, *extra)]))[0]
    fields = values[: len(MODEL_META_FIELDS)] if isinstance(values, list) else values
    meta = await read_model_meta(client.ctx.ai.models, keyspace, key, fields)
    return meta, values[len(MODEL_META_FIELDS) :]


def chunk_blob(blob: bytes, chunk_size: int) -> bytes | list[bytes]:
    """MODEL_CHUNK_SIZE chunking, with RedisAI's empty last chunk when the length is an exact multiple."""
    count = len(blob) // chunk_size + 1
    if count == 1:
        return blob
    view = memoryview(blob)
    return [bytes(view[i * chunk_size : (i + 1) * chunk_size]) for i in range(count)]


async def cmd_modelget(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELGET key [META] [BLOB]"""
    want_meta, want_blob = parse_modelget_flags(argv)
    meta, (blob,) = await _read_meta(client, argv[1], (b"blob",))
    return modelget_reply(meta, blob, want_meta, want_blob, client.ctx.ai.settings.model_chunk_size)


def modelget_reply(meta: ModelMeta, blob: bytes | None, want_meta: bool, want_blob: bool, chunk_size: int) -> Any:
    """The blob (chunked by MODEL_CHUNK_SIZE), the metadata, or both, as RedisAI lays them out."""
    blob_value = chunk_blob(blob or b"", chunk_size)
    if not want_meta:
        return blob_value
    reply: list[Any] = [
        "backend", meta.backend, "device", meta.device.text, "tag", meta.tag, "batchsize", meta.batchsize,
        "minbatchsize", meta.minbatchsize, "inputs", list(meta.inputs), "outputs", list(meta.outputs),
        "minbatchtimeout", meta.minbatchtimeout,
    ]
    return [*reply, "blob", blob_value] if want_blob else reply


async def cmd_modeldel(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELDEL key"""
    return await delete_stored(client, argv, MODEL_MARKER, msgs.MODEL_KEY_EMPTY_MSG)


async def cmd_modelscan(client: Client, argv: list[bytes]) -> Any:
    """AI._MODELSCAN"""
    return await scan_stored(client, argv, MODEL_MARKER)


# --- executing ----------------------------------------------------------------------------------------------------


async def cmd_modelexecute(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELEXECUTE key INPUTS n key... OUTPUTS m key... [TIMEOUT ms]"""
    check_modelexecute_arity(argv)
    return await attempted(partial(_execute, client, argv, parse_modelexecute))


async def cmd_modelrun(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELRUN key [TIMEOUT ms] INPUTS key... OUTPUTS key...   (deprecated)"""
    check_modelrun_arity(argv)
    return await attempted(partial(_execute, client, argv, parse_modelrun))


async def _execute(client: Client, argv: list[bytes], parse: ParseExecute, tried: Attempt) -> Any:
    """One try of read, run, write; server/ai/attempts.py says what comes next when something changed.

    An error before the run found on cached metadata, or on a model stored again while loading, is answered
    only once a read of the store finds it too, so it is never an older version's. Only a run whose model or
    inputs came from the cache has its write check them (STALEMODEL / STALEINPUT); a run on what it read from
    the store is written whatever is stored meanwhile, as in RedisAI. A batching model reads its inputs from
    the store: that round trip is where concurrent requests gather into one batch."""
    ai, keyspace = client.ctx.ai, client.keyspace()
    loading = False
    try:
        hint, out_hint = io_keys_hint(argv)
        read = await _read_phase(keyspace, argv[1], hint, out_hint, fresh=tried.from_store)
        meta = await read_model_meta(ai.models, keyspace, argv[1], read.meta)
        req = parse(argv, len(meta.inputs), len(meta.outputs))
        taken: tuple[tuple[bytes, bytes], ...] = ()
        inputs = None
        if list(req.inputs) == hint and not (meta.batchsize > 0 and any(read.from_cache)):
            inputs = decode_inputs(read.inputs, read.from_cache, ai.decoded)
            taken = read.cached_inputs(hint)
        if inputs is None:  # the prefetch guessed other keys, a batching model (its inputs' round trip gathers
            inputs = await _read_inputs(keyspace, req, ai.decoded)  # the batch), or a cached value not decoded
            taken = ()
        checks = read.checks
        if list(req.outputs) != out_hint:  # the lenient guess missed (an input key named "outputs"): ask again
            checks = await keyspace.pipeline(output_type_checks(list(req.outputs)))
        check_output_types(checks)
        loading = True
        model = await loaded_model(ai.models, meta, keyspace, req.key)
    except AIError as exc:
        again_or_raise(exc, tried.after_pre_run_error(exc, _worth_a_fresh_look(exc, keyspace.caching, loading)))
    cached = keyspace.caching and not tried.from_store
    op = SingleOp(req.key, meta.device.queue_name, ModelWork(model, len(meta.outputs)), inputs, req.outputs,
                  req.timeout_ms, batch=batch_spec(meta, req.key, client.ctx.metrics), samples=True,
                  record=not tried.again, digest=meta.digest if cached else None, cached_inputs=taken,
                  again=partial(run_again, tried) if cached else None)
    return await execute_single_op(ai, keyspace, op)


def _worth_a_fresh_look(exc: AIError, caching: bool, loading: bool) -> bool:
    """Whether a pre-run error may be one of an older version: the model stored again while it was being loaded,
    or, with the cache on, an error found on the metadata or inputs before loading — not the store being
    unavailable (asking again would wait a second timeout) nor the backend refusing the model (loaded twice)."""
    if isinstance(exc, ChangedWhileLoading):
        return True
    return caching and not loading and not unavailable(exc)


class ReadPhase:
    """What a MODELEXECUTE read before its run: the model's metadata, the inputs (GET replies), the output keys'
    type checks, and which inputs came from the coherent cache (the output write checks those). One a
    request: a plain class, whose ``__init__`` mypyc compiles (a dataclass's runs interpreted)."""

    __slots__ = ("checks", "from_cache", "inputs", "meta")

    def __init__(self, meta: Any, inputs: list[Any], checks: list[Any], from_cache: list[bool]) -> None:
        self.meta: Final = meta
        self.inputs: Final = inputs
        self.checks: Final = checks
        self.from_cache: Final = from_cache

    def cached_inputs(self, keys: list[bytes]) -> tuple[tuple[bytes, bytes], ...]:
        """(key, what the write compares: ``input_check_value``) of the inputs read from the cache. An index
        loop: mypyc does not specialise a ``zip(..., strict=True)``."""
        if len(keys) != len(self.inputs):
            raise ValueError("one key an input")
        taken: list[tuple[bytes, bytes]] = []
        for index in range(len(keys)):
            value = self.inputs[index]
            if self.from_cache[index] and (isinstance(value, bytes) or isinstance(value, TensorValue)):
                taken.append((keys[index], input_check_value(value)))
        return tuple(taken)


async def _read_phase(keyspace: Keyspace, key: bytes, hint: list[bytes], out_hint: list[bytes],
                      fresh: bool = False) -> ReadPhase:
    """The model's metadata and the inputs (from the coherent cache when it holds them), and the output keys'
    type checks, which are skipped for keys that last held a tensor we wrote (the write checks again,
    atomically). Checks to make, or inputs a cluster under load reads (``Keyspace.inputs_from_cache``): the
    inputs are read with the checks in one pipelined round trip. Without a cache, or ``fresh``: everything in
    that round trip."""
    meta_read = (b"HMGET", key, *MODEL_META_FIELDS)
    checks = [] if keyspace.known_tensors(out_hint) else output_type_checks(out_hint)
    gets = [(b"GET", k) for k in hint]
    n = len(hint)
    if not keyspace.caching or fresh:
        keyspace.forget([key, *hint])
        replies = await keyspace.pipeline([meta_read, *gets, *checks])
        return ReadPhase(replies[0], replies[1 : n + 1], _checks_or_free(replies[n + 1 :], out_hint), [False] * n)
    if checks or not keyspace.inputs_from_cache(hint, out_hint):
        (meta,) = await keyspace.read_through([meta_read])
        rest = await keyspace.pipeline([*gets, *checks])
        return ReadPhase(meta, rest[:n], _checks_or_free(rest[n:], out_hint), [False] * n)
    hits: list[bool] = []
    meta, *inputs = await keyspace.read_through([meta_read, *gets], hits)
    return ReadPhase(meta, inputs, [b""] * len(out_hint), hits[1:])


def _checks_or_free(found: list[Any], out_hint: list[bytes]) -> list[Any]:
    """The type checks' replies, or "free" for every output when none were made."""
    return found if found else [b""] * len(out_hint)


async def _read_inputs(keyspace: Keyspace, req: ModelExecuteRequest, decoded: DecodedInputs) -> list[Tensor]:
    """The inputs from the store, by the keys the strict parse found: when the lenient prefetch guessed other
    keys, for a batching model, or when a cached value did not decode."""
    return [decoded.decode(v, cached=False) for v in await keyspace.read_many(list(req.inputs))]
