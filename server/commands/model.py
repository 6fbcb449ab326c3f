"""Model commands: AI.MODELSTORE/MODELSET, AI.MODELGET, AI.MODELDEL, AI.MODELEXECUTE/MODELRUN, AI._MODELSCAN.

A model is one Redis hash (backends/objects.py). AI.MODELEXECUTE reads the model's metadata, its digest
and the input tensors in one round trip, runs as a one-op DAG on the model's device queue, then writes the
outputs in one atomic round trip before it replies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError
from backends.objects import (
    MODEL_MARKER,
    MODEL_META_FIELDS,
    ModelMeta,
    blob_digest,
    decode_model_meta,
    model_hash_fields,
)
from backends.tensor import HEADER_SIZE, Tensor, decode_tensor, encode_tensor, looks_like_tensor
from dag.batching import BatchPolicy
from dag.execute import ModelWork
from dag.runinfo import BatchSpec, RunInfo, Step
from server.ai.execution import execute_run
from server.ai.state import RunStats
from server.ai.stored import fetch_blob
from server.commands.model_args import (
    ModelExecuteRequest,
    ModelStoreRequest,
    check_modelexecute_arity,
    check_modelrun_arity,
    input_keys_hint,
    output_keys_hint,
    parse_modelexecute,
    parse_modelget_flags,
    parse_modelrun,
    parse_modelset,
    parse_modelstore,
)
from server.commands.stored import delete_stored, scan_stored
from server.ops.metrics import Metrics
from server.protocol.reply import OK, Status
from server.store.atomic import STORE_OBJECT, ScriptCall, stats_key
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from server.commands.context import Client

log = logging.getLogger("redisai.model")

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
    """Build the model (off the loop: a broken blob is the backend's error), check the key, write, cache."""
    ai = client.ctx.ai
    digest = blob_digest(req.blob)
    draft = ModelMeta(req.backend, req.device, req.tag, req.batchsize, req.minbatchsize, req.minbatchtimeout,
                      req.inputs, req.outputs, digest)
    loaded = await ai.models.load(draft, req.blob)
    if req.backend != "TF":  # TORCH/ONNX name their inputs and outputs themselves
        draft = ModelMeta(req.backend, req.device, req.tag, req.batchsize, req.minbatchsize, req.minbatchtimeout,
                          tuple(loaded.input_names), tuple(loaded.output_names), digest)
    await client.keyspace().run_script(STORE_OBJECT, [req.key, stats_key(req.key)],
                                       [MODEL_MARKER, *model_hash_fields(draft, req.blob)])
    ai.models.put(draft, loaded)
    ai.queues.queue(draft.device.queue_name)
    ai.stats[req.key] = RunStats(req.key, "MODEL", draft.backend, draft.device.text, draft.tag)
    client.ctx.metrics.forget(req.key)  # a re-stored model starts with fresh series, as with AI.INFO
    return OK


# --- reading and deleting -----------------------------------------------------------------------------------------


async def _read_meta(keyspace: Keyspace, key: bytes, extra: tuple[bytes, ...] = ()) -> tuple[ModelMeta, list[Any]]:
    values = (await keyspace.pipeline([(b"HMGET", key, *MODEL_META_FIELDS, *extra)]))[0]
    meta = await _model_meta(keyspace, key, values[: len(MODEL_META_FIELDS)] if isinstance(values, list) else values)
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
    meta, (blob,) = await _read_meta(client.keyspace(), argv[1], (b"blob",))
    blob_value = chunk_blob(blob or b"", client.ctx.ai.settings.model_chunk_size)
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
    return await _execute(client, argv, parse_modelexecute)


async def cmd_modelrun(client: Client, argv: list[bytes]) -> Any:
    """AI.MODELRUN key [TIMEOUT ms] INPUTS key... OUTPUTS key...   (deprecated)"""
    check_modelrun_arity(argv)
    return await _execute(client, argv, parse_modelrun)


def decode_input(value: Any) -> Tensor:
    """A GET reply as an input tensor: RedisAI's errors for a missing key and for any other type."""
    if value is None:
        raise AIError(msgs.TENSOR_KEY_EMPTY_MSG)
    if isinstance(value, AIError):
        raise AIError(msgs.WRONGTYPE_MSG)
    return decode_tensor(value)


async def _execute(client: Client, argv: list[bytes], parse: ParseExecute, again: bool = False) -> Any:
    """Read, run, write. ``again``: the model changed under a run that used cached metadata (STALEMODEL from
    the write): run once more with the store's metadata; the first run was already counted in AI.INFO."""
    ai, keyspace = client.ctx.ai, client.keyspace()
    hint, out_hint = input_keys_hint(argv), output_keys_hint(argv)
    replies, checks = await _read_phase(keyspace, argv[1], hint, out_hint, fresh=again)
    meta = await _model_meta(keyspace, argv[1], replies[0])
    req = parse(argv, len(meta.inputs), len(meta.outputs))
    fetched = replies[1:]
    inputs = [decode_input(v) for v in fetched] if list(req.inputs) == hint else await _read_inputs(keyspace, req)
    if list(req.outputs) != out_hint:  # the lenient guess missed (e.g. an input key named "outputs"): ask again
        checks = await keyspace.pipeline(output_type_checks(list(req.outputs)))
    check_output_types(checks)
    model = await ai.models.get(meta, lambda: fetch_blob(keyspace, req.key))
    run = one_op_run(meta, ModelWork(model, len(meta.outputs)), inputs, len(req.outputs), req.timeout_ms,
                     batch_spec(meta, req.key, client.ctx.metrics))
    await execute_run(ai.queues, run, ai.inline)
    counters = [] if again else _record_stats(client, req.key, run, len(inputs))
    if run.timed_out or run.error is not None:
        await keyspace.run_scripts(counters)
        if run.error is not None:
            raise run.error
        return Status(msgs.TIMEDOUT_STATUS)
    try:
        await write_outputs(keyspace, req.outputs, run.slots[len(inputs) :], counters, (req.key, meta.digest))
    except AIError as exc:
        if not exc.message.startswith("STALEMODEL") or again:
            raise
        return await _execute(client, argv, parse, again=True)
    return OK


async def _read_phase(keyspace: Keyspace, key: bytes, hint: list[bytes], out_hint: list[bytes],
                      fresh: bool = False) -> tuple[list[Any], list[Any]]:
    """The model's metadata (from the coherent cache when it holds it), the inputs, and the output keys' type
    checks, which are skipped for keys that last held a tensor we wrote (the write checks again, atomically).
    Inputs are always read from the store, in one pipelined round trip with the checks. Without a cache, or
    ``fresh``: the metadata goes in that round trip too."""
    meta_read = (b"HMGET", key, *MODEL_META_FIELDS)
    checks = [] if keyspace.known_tensors(out_hint) else output_type_checks(out_hint)
    reads = [*((b"GET", k) for k in hint), *checks]
    if not keyspace.caching or fresh:
        keyspace.forget([key])
        replies = await keyspace.pipeline([meta_read, *reads])
        meta, rest = replies[0], replies[1:]
    else:
        (meta,) = await keyspace.read_through([meta_read])
        rest = await keyspace.pipeline(reads)
    inputs, found = rest[: len(hint)], rest[len(hint) :]
    return [meta, *inputs], found if checks else [b""] * len(out_hint)


async def _model_meta(keyspace: Keyspace, key: bytes, values: Any) -> ModelMeta:
    """The model's metadata from HMGET; only when every field is missing does a second look tell a missing
    key (``model key is empty``) from a hash that is not a model (WRONGTYPE)."""
    if isinstance(values, list) and all(v is None for v in values):
        exists = await keyspace.call(b"EXISTS", key)
    else:
        exists = 1
    meta = decode_model_meta(values, exists)
    if meta is None:
        raise AIError(msgs.MODEL_KEY_EMPTY_MSG)
    return meta


def output_type_checks(keys: list[bytes]) -> list[tuple[bytes, ...]]:
    """The first header bytes of every output key (GETRANGE: "" when missing, WRONGTYPE when not a string)."""
    return [(b"GETRANGE", key, b"0", str(HEADER_SIZE - 1).encode()) for key in keys]


def check_output_types(replies: list[Any]) -> None:
    """An output key holding anything but a tensor is WRONGTYPE, and nothing runs or is written (RedisAI
    replies +OK and then a second -WRONGTYPE here, quirk 9; we send the error only). An empty prefix is a
    missing key (or an empty string, which is then replaced)."""
    for prefix in replies:
        if isinstance(prefix, AIError) or (prefix and not looks_like_tensor(prefix)):
            raise AIError(msgs.WRONGTYPE_MSG)


async def _read_inputs(keyspace: Keyspace, req: ModelExecuteRequest) -> list[Tensor]:
    return [decode_input(v) for v in await keyspace.read_many(list(req.inputs))]


def batch_spec(meta: ModelMeta, key: bytes, metrics: Metrics) -> BatchSpec | None:
    """Auto-batching for a model stored with BATCHSIZE > 0: partners must use the very same loaded model."""
    if meta.batchsize <= 0:
        return None
    policy = BatchPolicy(meta.batchsize, meta.minbatchsize, meta.minbatchtimeout)
    device = meta.device.queue_name
    on_batch = (lambda size: metrics.observe_batch(key, size, device)) if metrics.enabled else None
    return BatchSpec(policy, (meta.backend, device, meta.digest), on_batch)


def one_op_run(meta: ModelMeta, work: ModelWork, inputs: list[Tensor], n_outputs: int,
               timeout_ms: int | None, batch: BatchSpec | None = None) -> RunInfo:
    """A single MODELEXECUTE as a one-op DAG: inputs in slots 0..n-1, outputs after them."""
    n_in = len(inputs)
    step = Step(0, meta.device.queue_name, tuple(range(n_in)), tuple(range(n_in, n_in + n_outputs)), work, batch)
    deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
    return RunInfo([step], [*inputs, *([None] * n_outputs)], deadline=deadline)


async def write_outputs(keyspace: Keyspace, keys: tuple[bytes, ...], tensors: list[Any],
                        counters: Sequence[ScriptCall] = (), model: tuple[bytes, str] | None = None) -> None:
    """Write every output tensor in one atomic step that checks each key again (an overwrite also drops any
    TTL, as RedisAI's does); WRONGTYPE and nothing written if a key was turned into something else meanwhile.
    The run's AI.INFO ``counters`` go in the same round trip; ``model`` (key, digest): STALEMODEL and nothing
    written if the store holds another model there now."""
    await keyspace.set_tensors(keys, [encode_tensor(t) for t in tensors], also=counters, model=model)


def _record_stats(client: Client, key: bytes, run: RunInfo, n_inputs: int) -> list[ScriptCall]:
    """AI.INFO: samples = dim 0 of the first output (REDISAI-REFERENCE §2.14)."""
    first = run.slots[n_inputs] if len(run.slots) > n_inputs else None
    samples = first.shape[0] if first is not None and first.shape else 0
    return client.ctx.ai.record(key, run.results[0], samples)
