"""AI.DAGEXECUTE / AI.DAGEXECUTE_RO and the deprecated AI.DAGRUN / AI.DAGRUN_RO.

One round trip reads every LOAD tensor, every model's metadata and every PERSIST key's type; the ops are
parsed in order against that; local names become slots (dag.mangle); the model and script ops become the
steps of one RunInfo fanned out to their devices; the reply is built when the last device lets go, and the
PERSIST keys are written in one atomic round trip before it is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from backends import errors as msgs
from backends.errors import AIError
from backends.objects import MODEL_META_FIELDS, SCRIPT_META_FIELDS
from backends.tensor import encode_tensor
from backends.tensor_args import tensorget_reply
from dag.execute import ModelWork
from dag.mangle import ResolvedDag, resolve
from dag.ops import DagOp, ModelOp, ScriptOp, TensorGetOp, TensorSetOp
from dag.parse import DAGEXECUTE, DAGEXECUTE_RO, DAGRUN, DAGRUN_RO, DagHeader, DagKind, parse_header
from dag.residency import dag_reads
from dag.runinfo import RunInfo, Step, Work
from server.ai.attempts import Attempt, again_or_raise, attempted
from server.ai.execution import execute_run
from server.ai.state import AIState
from server.ai.steps import BatchObserver, batch_spec, deadline_after, script_work, step_samples
from server.ai.stored import ChangedWhileLoading, compiled_script, loaded_model
from server.ai.tensor_io import check_output_types, output_type_checks
from server.commands.dag_ops import objects_named, parse_ops
from server.protocol.reply import OK, Status
from server.store.atomic import ScriptCall
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from server.commands.context import Client, ServerContext

NA: Final = Status(msgs.NA_STATUS)


async def cmd_dagexecute(client: Client, argv: list[bytes]) -> Any:
    """AI.DAGEXECUTE [LOAD n key ...] [PERSIST n key ...] [KEYS n key ...] [ROUTING key] [TIMEOUT ms] |> op ..."""
    return await run_dag(client, argv, DAGEXECUTE)


async def cmd_dagexecute_ro(client: Client, argv: list[bytes]) -> Any:
    """AI.DAGEXECUTE_RO [LOAD n key ...] [KEYS n key ...] [ROUTING key] [TIMEOUT ms] |> op [|> op ...]"""
    return await run_dag(client, argv, DAGEXECUTE_RO)


async def cmd_dagrun(client: Client, argv: list[bytes]) -> Any:
    """AI.DAGRUN [LOAD n key...] [PERSIST n key...] [TIMEOUT ms] |> op [|> op ...]   (deprecated)"""
    return await run_dag(client, argv, DAGRUN)


async def cmd_dagrun_ro(client: Client, argv: list[bytes]) -> Any:
    """AI.DAGRUN_RO [LOAD n key...] [TIMEOUT ms] |> op [|> op ...]   (deprecated)"""
    return await run_dag(client, argv, DAGRUN_RO)


class DagOutcome:
    """A DAG after its run: its ops, slots, run and the AI.INFO counters of its model and script ops.
    Immutable; a plain class (one a request) so that mypyc compiles its ``__init__``."""

    __slots__ = ("counters", "ops", "resolved", "run", "step_of_op")

    def __init__(self, ops: list[DagOp], resolved: ResolvedDag, run: RunInfo, step_of_op: dict[int, int],
                 counters: list[ScriptCall]) -> None:
        self.ops: Final = ops
        self.resolved: Final = resolved
        self.run: Final = run
        self.step_of_op: Final = step_of_op
        self.counters: Final = counters

    def persisted(self) -> list[bytes]:
        """The encoded tensors of the PERSIST names, in their order."""
        return [encode_tensor(self.run.slots[slot]) for _name, slot in self.resolved.persist]


async def run_dag(client: Client, argv: list[bytes], kind: DagKind) -> Any:
    header = parse_header(argv, kind)
    keyspace = client.keyspace()
    done, persist_checks = await attempted(partial(_dag_try, client.ctx, keyspace, header, kind))
    ops, run, counters = done.ops, done.run, done.counters
    if run.timed_out:
        await keyspace.run_scripts(counters)
        return Status(msgs.TIMEDOUT_STATUS)
    values_max = client.ctx.config.tensorget_values_max
    reply = [_op_element(op, i, run, done.resolved, done.step_of_op, values_max) for i, op in enumerate(ops)]
    if run.error is None and header.persist:
        failure = await _persist(keyspace, done, persist_checks)
        if failure is not None:
            reply.append(failure)
    else:
        await keyspace.run_scripts(counters)
    return reply


async def _dag_try(ctx: ServerContext, keyspace: Keyspace, header: DagHeader, kind: DagKind,
                   tried: Attempt) -> tuple[DagOutcome, Any]:
    """Read and run (server/ai/attempts.py): a model or script stored again while it was being loaded, before
    anything ran, is read again as the store holds it now (``LOAD_TRIES`` in all)."""
    ops, loaded, persist_checks = await parse_with_store(ctx, keyspace, header, kind)
    try:
        done = await execute_parsed(ctx, keyspace, (header.load, loaded), ops, header.persist, header.timeout_ms)
    except ChangedWhileLoading as exc:
        again_or_raise(exc, tried.after_load_change())
    return done, persist_checks


async def execute_parsed(ctx: ServerContext, keyspace: Keyspace, load: tuple[list[bytes], list[Any]],
                         ops: list[DagOp], persist: list[bytes], timeout_ms: int | None) -> DagOutcome:
    """The DAG engine after parsing (AI.DAGEXECUTE, and AI.GRAPHEXECUTE's interpreted mode): names to slots,
    the ops' works, one RunInfo fanned out to its devices, the AI.INFO counters. ``load``: the local names
    and their tensors."""
    resolved = resolve(load[0], ops, persist)
    works = await op_works(ctx, keyspace, ops)
    run, step_of_op = build_run(ops, resolved, load[1], works, timeout_ms, ctx.metrics)
    if run.steps:
        await execute_run(ctx.ai.queues, run, ctx.ai.inline)
    return DagOutcome(ops, resolved, run, step_of_op, record_stats(ctx.ai, ops, run, step_of_op, keyspace.stats_key))


def _lookups(commands: list[tuple[bytes, ...]], keys: list[bytes], fields: tuple[bytes, ...]) -> None:
    for key in keys:
        commands += [(b"HMGET", key, *fields), (b"EXISTS", key)]


async def parse_with_store(ctx: ServerContext, keyspace: Keyspace, header: DagHeader,
                            kind: DagKind) -> tuple[list[DagOp], list[Any], list[Any]]:
    """The one round trip before queuing: LOAD tensors, model and script metadata, PERSIST key types; then the
    ops are parsed against that, in order."""
    models, scripts = objects_named(header.ops) if header.error is None else ([], [])
    commands: list[tuple[bytes, ...]] = [(b"GET", key) for key in header.load]
    _lookups(commands, models, MODEL_META_FIELDS)
    _lookups(commands, scripts, SCRIPT_META_FIELDS)
    commands += output_type_checks(header.persist)
    replies = await keyspace.pipeline(commands)
    loaded = [ctx.ai.decoded.decode(value, cached=False) for value in replies[: len(header.load)]]
    if header.error is not None:
        raise header.error
    position = len(header.load)
    lookup: list[dict[bytes, tuple[Any, Any]]] = []
    for keys in (models, scripts):
        lookup.append({key: (replies[position + 2 * i], replies[position + 2 * i + 1]) for i, key in enumerate(keys)})
        position += 2 * len(keys)
    ops = parse_ops(header.ops, kind, lookup[0], lookup[1], ctx.ai.models.decode_meta)
    return ops, loaded, replies[position:]


async def op_works(ctx: ServerContext, keyspace: Keyspace, ops: list[DagOp]) -> dict[int, Work]:
    """The worker-side callable of every model and script op (loaded, or taken from the caches)."""
    works: dict[int, Work] = {}
    for index, op in enumerate(ops):
        if isinstance(op, ModelOp):
            model = await loaded_model(ctx.ai.models, op.meta, keyspace, op.key)
            works[index] = ModelWork(model, len(op.meta.outputs))
        elif isinstance(op, ScriptOp):
            compiled = await compiled_script(ctx.ai.scripts, op.meta, keyspace, op.key)
            works[index] = script_work(op.meta, compiled, op.request, ctx.keyspace(0), ctx.ai.models)
    return works


def build_run(ops: list[DagOp], resolved: ResolvedDag, loaded: list[Any], works: dict[int, Work],
              timeout_ms: int | None, metrics: BatchObserver) -> tuple[RunInfo, dict[int, int]]:
    """Slots filled with the LOADed and TENSORSET tensors; one step per model or script op."""
    slots: list[Any] = [None] * resolved.n_slots
    for slot, tensor in zip(resolved.load_slots, loaded, strict=True):
        slots[slot] = tensor
    for index, op in enumerate(ops):
        if isinstance(op, TensorSetOp):
            slots[resolved.op_outputs[index][0]] = op.tensor
    steps, step_of_op = build_steps(ops, resolved.op_inputs, resolved.op_outputs, works, metrics)
    run = RunInfo(steps, slots, deadline=deadline_after(timeout_ms))
    if any(isinstance(op, (ModelOp, ScriptOp)) and op.meta.device.is_gpu for op in ops):
        run.host_after = dag_reads(ops, resolved)  # intermediates nobody reads stay on their GPU
    return run, step_of_op


def build_steps(ops: list[DagOp], op_inputs: Sequence[tuple[int, ...]], op_outputs: Sequence[tuple[int, ...]],
                works: dict[int, Work], metrics: BatchObserver) -> tuple[list[Step], dict[int, int]]:
    """One step per model or script op, in op order, on its object's device; and each op's step index."""
    steps: list[Step] = []
    step_of_op: dict[int, int] = {}
    for index, op in enumerate(ops):
        if isinstance(op, (ModelOp, ScriptOp)):
            step_of_op[index] = len(steps)
            batch = batch_spec(op.meta, op.key, metrics) if isinstance(op, ModelOp) else None
            steps.append(Step(len(steps), op.meta.device.queue_name, op_inputs[index], op_outputs[index],
                              works[index], batch, isinstance(op, ScriptOp)))
    return steps, step_of_op


def _op_element(op: DagOp, index: int, run: RunInfo, resolved: ResolvedDag, step_of_op: dict[int, int],
                values_max: int) -> Any:
    if isinstance(op, TensorSetOp):
        return OK
    if isinstance(op, TensorGetOp):
        tensor = run.slots[resolved.op_inputs[index][0]]
        if tensor is None:
            return NA
        try:
            return tensorget_reply(tensor, op.fmt, values_max)
        except AIError as exc:
            return exc
    result = run.results[step_of_op[index]]
    if result.ok:
        return OK
    return result.error if result.error is not None else NA


async def _persist(keyspace: Keyspace, done: DagOutcome, checks: list[Any]) -> AIError | None:
    """Write every PERSIST tensor in one atomic, checked step, with the ops' AI.INFO counters; a key holding a
    non-tensor is the extra error element."""
    try:
        check_output_types(checks)
    except AIError as exc:
        await keyspace.run_scripts(done.counters)
        return exc
    names = [name for name, _slot in done.resolved.persist]
    try:
        await keyspace.set_tensors(names, done.persisted(), also=done.counters)
    except AIError as exc:
        return exc
    return None


def record_stats(ai: AIState, ops: list[DagOp], run: RunInfo, step_of_op: dict[int, int],
                 counters_at: Callable[[bytes], bytes]) -> list[ScriptCall]:
    """AI.INFO after the whole DAG: samples = dim 0 of a model op's first output; scripts count none."""
    counters: list[ScriptCall] = []
    for index, step_index in step_of_op.items():
        op = ops[index]
        assert isinstance(op, (ModelOp, ScriptOp))
        samples = step_samples(run, step_index) if isinstance(op, ModelOp) else 0
        counters += ai.record(op.key, run.results[step_index], samples, counters_at)
    return counters
