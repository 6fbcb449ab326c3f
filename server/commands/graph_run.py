"""Running a stored graph: COMPILED (the default) or INTERPRETED (today's DAG engine, the fallback and reference).

COMPILED: one read of the inputs with the metadata of the graph's models and scripts (both from the coherent
cache when it holds them; the write checks what came from it: STALEMODEL / STALEINPUT); the graph bound to
those versions is taken from the process's cache (built once: ops parsed, steps, counters —
server/ai/graphs.py); only the roots are queued, and each other step is pushed by the worker that ends its
last producer (dag/compiled.py). A graph of small model ops on idle
CPU queues runs whole on the event-loop thread instead, producers first (dag/inline.py). Then one write of
the outputs with the AI.INFO counters, and OK.

INTERPRETED: the same graph as an AI.DAGEXECUTE that LOADs the input keys under the graph's input names and
PERSISTs its output names to the output keys, with its ops in the graph's run order: parsed, resolved and
scheduled anew each run, by the DAG engine itself.

Both answer alike: TIMEDOUT when the deadline passed; else the error of the first failed op in run order
(an error in one branch stops the others, as in a DAG); else OK once the outputs are written.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError, unavailable
from backends.objects import MODEL_META_FIELDS, SCRIPT_META_FIELDS
from backends.tensor import Tensor, TensorValue, encode_tensor
from dag.graph_plan import GraphPlan
from dag.lanes import is_gpu_queue
from dag.ops import DagOp, ModelOp, ScriptOp, TensorSetOp
from dag.parse import DAGEXECUTE, DagHeader
from dag.runinfo import RunInfo, size_class
from server.ai.attempts import FIRST_TRY, Attempt, again_or_raise, attempted
from server.ai.execution import execute_counted
from server.ai.graphs import BoundGraph, StoredGraph
from server.ai.steps import deadline_after, step_samples
from server.ai.tensor_io import decode_input, decode_inputs
from server.commands.dag import build_steps, execute_parsed, op_works, parse_with_store
from server.commands.dag_ops import ObjectLookup, parse_ops
from server.commands.graph_args import INTERPRETED, GraphExecuteRequest
from server.commands.graph_store import load_graph
from server.protocol.reply import OK, Status
from server.store.atomic import STALE_INPUT, STALE_MODEL, ScriptCall, input_check_value, record_run_call
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from server.commands.context import ServerContext


CachedInputs = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class GraphOutcome:
    """A run of either mode: the RunInfo, the output tensors (encoded), the ops' AI.INFO counters."""

    run: RunInfo
    outputs: list[bytes]
    counters: list[ScriptCall]
    guards: list[tuple[bytes, str]]  # (key, digest) of the graph and its objects, when read from the cache
    cached_inputs: CachedInputs = ()  # (key, input_check_value) of the inputs taken from the cache


async def execute_graph(ctx: ServerContext, keyspace: Keyspace, graph: StoredGraph, req: GraphExecuteRequest) -> Any:
    """Run and answer, in as many tries as server/ai/attempts.py asks for: an error before the run (found on
    cached metadata in compiled mode, or an object stored again while it was being loaded) is answered only
    once the store's own values give it too; STALEMODEL from the write of a compiled run that used cached
    metadata runs it once more on what the store holds (the first run was counted). A try after the first
    reads the graph again from the store."""
    return await attempted(partial(_graph_try, ctx, keyspace, graph, req))


async def _graph_try(ctx: ServerContext, keyspace: Keyspace, first: StoredGraph, req: GraphExecuteRequest,
                     tried: Attempt) -> Any:
    graph = first if tried == FIRST_TRY else await load_graph(ctx.ai.graphs, keyspace, req.key, fresh=True)
    for what, expected, given in (("inputs", graph.inputs, req.inputs), ("outputs", graph.outputs, req.outputs)):
        if len(expected) != len(given):
            raise AIError(msgs.GRAPH_BIND_COUNT_FMT.format(expected=len(expected), what=what, given=len(given)))
    started = time.perf_counter()
    counted_run = 0 if tried.fresh or tried.loads > 1 else 1  # (a retry after a pre-run error is not another run)
    try:
        if req.mode == INTERPRETED:
            ctx.ai.graphs.interpreted_runs += counted_run
            outcome = await _interpreted(ctx, keyspace, graph, req)
        else:
            ctx.ai.graphs.compiled_runs += counted_run
            outcome = await _compiled(ctx, keyspace, graph, req, fresh=tried.from_store)
    except AIError as exc:
        cached_metadata = req.mode != INTERPRETED and keyspace.caching and not unavailable(exc)
        again_or_raise(exc, tried.after_pre_run_error(exc, cached_metadata))
    try:
        return await _answer(ctx, keyspace, req, outcome, int((time.perf_counter() - started) * 1_000_000),
                             counted=not tried.again)
    except AIError as exc:
        again_or_raise(exc, tried.after_stale() if exc.message.startswith((STALE_MODEL, STALE_INPUT)) else None)


async def _answer(ctx: ServerContext, keyspace: Keyspace, req: GraphExecuteRequest, outcome: GraphOutcome,
                  duration_us: int, counted: bool) -> Any:
    """TIMEDOUT, the first error, or OK after the one write of outputs and counters (unless ``counted``
    already); the run's state goes to the reaper, to be let go after the reply."""
    run = outcome.run
    ctx.ai.reaper.defer(run)
    error = run.first_failure() or run.error
    failed = run.timed_out or error is not None
    graph_counter = record_run_call(keyspace.stats_key(req.key), 1, 0 if failed else duration_us, 0, int(failed))
    counters = [*outcome.counters, graph_counter] if counted else []
    if failed:
        await keyspace.run_scripts(counters)
        if run.timed_out:
            return Status(msgs.TIMEDOUT_STATUS)
        assert error is not None
        raise error
    await keyspace.set_tensors(req.outputs, outcome.outputs, also=counters, guards=outcome.guards,
                               inputs=outcome.cached_inputs)
    return OK


# --- interpreted: the DAG engine ------------------------------------------------------------------------------------


async def _interpreted(ctx: ServerContext, keyspace: Keyspace, graph: StoredGraph,
                       req: GraphExecuteRequest) -> GraphOutcome:
    header = DagHeader(load=list(req.inputs), ops=[list(graph.ops[i].argv) for i in graph.plan.order])
    ops, loaded, _checks = await parse_with_store(ctx, keyspace, header, DAGEXECUTE)
    done = await execute_parsed(ctx, keyspace, (list(graph.inputs), loaded), ops, list(graph.outputs),
                                req.timeout_ms)
    outputs = done.persisted() if done.run.error is None and not done.run.timed_out else []
    return GraphOutcome(done.run, outputs, done.counters, [])  # the DAG engine reads the store, not the cache


# --- compiled -------------------------------------------------------------------------------------------------------


async def _compiled(ctx: ServerContext, keyspace: Keyspace, graph: StoredGraph, req: GraphExecuteRequest,
                    fresh: bool) -> GraphOutcome:
    """Read, bind (or reuse the binding for these object versions), run, and collect what the write needs.
    ``fresh``: read the graph's objects from the store, not the coherent cache."""
    inputs, models, scripts, taken = await _read(ctx, keyspace, graph, req, fresh)
    signature: Hashable = (tuple(_frozen(v) for v in models.values()), tuple(_frozen(v) for v in scripts.values()))
    bound = graph.bindings.get(signature) or graph.bindings.put(signature,
                                                                await _bind(ctx, keyspace, graph, models, scripts))
    slots = list(bound.slots)
    for slot, tensor in zip(graph.plan.input_slots, inputs, strict=True):
        slots[slot] = tensor
    run = RunInfo(bound.steps, slots, deadline=deadline_after(req.timeout_ms))
    if any(is_gpu_queue(queue.name) for queue in bound.queues):
        run.host_after = frozenset(graph.plan.output_slots)  # intermediates nobody reads stay on their GPU
    if bound.steps:
        await _run_steps(ctx, bound, run, size_class(inputs))
    ok = run.error is None and not run.timed_out
    outputs = [encode_tensor(slots[slot]) for slot in graph.plan.output_slots] if ok else []
    cached = keyspace.caching and not fresh
    guards = [(req.key, graph.digest), *_digests(models), *_digests(scripts)] if cached else []
    return GraphOutcome(run, outputs, _counters(ctx, keyspace, bound, run), guards, taken)


def _counters(ctx: ServerContext, keyspace: Keyspace, bound: BoundGraph, run: RunInfo) -> list[ScriptCall]:
    """AI.INFO of the graph's models and scripts: one update per object (samples: dim 0 of a model op's first
    output; scripts count none)."""
    return [call for key, model, steps in bound.by_object
            for call in ctx.ai.record_many(key, [(run.results[i], step_samples(run, i) if model else 0)
                                                 for i in steps], keyspace.stats_key)]


def _digests(objects: dict[bytes, Any]) -> list[tuple[bytes, str]]:
    """(key, digest) of each object as read (digest is the last metadata field of models and scripts alike)."""
    return [(key, values[-1].decode()) for key, (values, _exists) in objects.items()]


async def _run_steps(ctx: ServerContext, bound: BoundGraph, run: RunInfo, size: int) -> None:
    """Inline (all on this thread) when the graph's small ops allow it, else on the workers by counters."""
    ai = ctx.ai
    if ai.inline.graph_eligible(bound.steps, bound.costs.estimate(size)):
        contended = any(queue.busy() for queue in bound.queues)
        cpu_seconds = bound.fusion.run(bound.steps, bound.queues, run, ai.inline)
        if cpu_seconds is None:  # not fusable, or the fused call failed (nothing recorded): op by op
            cpu_seconds = ai.inline.run_graph_here(run, range(len(bound.steps)), bound.queues)
        bound.costs.estimate_for(size).ran_inline(cpu_seconds * 1_000_000, ai.inline.graph_budget_us, contended)
        return
    await execute_counted(ai.queues, run, bound.consumers, bound.deps, bound.roots)
    bound.costs.estimate_for(size).ran_on_worker(sum(result.cpu_us for result in run.results))


def _frozen(value: tuple[Any, Any]) -> Hashable:
    """A lookup entry (HMGET values, EXISTS) as part of a binding's cache key."""
    values, exists = value
    return (tuple(values) if isinstance(values, list) else repr(values)), exists


async def _read(ctx: ServerContext, keyspace: Keyspace, graph: StoredGraph, req: GraphExecuteRequest,
                fresh: bool) -> tuple[list[Tensor], dict[bytes, Any], dict[bytes, Any], CachedInputs]:
    """The input tensors, the graph's objects' metadata, and (key, check value) of the inputs taken from the coherent
    cache, which the output write checks (STALEINPUT), as a model run's does. Without the cache (or ``fresh``):
    everything in one round trip from the store. With it: the metadata and the inputs from the cache when it
    holds them (``Keyspace.inputs_from_cache`` says whether the inputs may come from it), else the inputs in one
    round trip."""
    metas: list[tuple[bytes, ...]] = [(b"HMGET", key, *MODEL_META_FIELDS) for key in graph.models]
    metas += [(b"HMGET", key, *SCRIPT_META_FIELDS) for key in graph.scripts]
    gets = [(b"GET", key) for key in req.inputs]
    if fresh:
        keyspace.forget([*graph.models, *graph.scripts, *req.inputs])
    from_cache = [False] * len(gets)
    if keyspace.caching and not fresh and keyspace.inputs_from_cache(req.inputs, req.outputs):
        hits: list[bool] = []
        replies = await keyspace.read_through([*metas, *gets], hits)
        from_cache = hits[len(metas) :]
    elif keyspace.caching and not fresh:
        replies = [*await keyspace.read_through(metas), *await keyspace.pipeline(gets)]
    else:
        replies = await keyspace.pipeline([*metas, *gets])
    found, values = replies[: len(metas)], replies[len(metas) :]
    inputs = decode_inputs(values, from_cache, ctx.ai.decoded)
    if inputs is None:  # a cached value that does not decode: the store's value, and its error, are the true ones
        values, from_cache = await keyspace.pipeline(gets), [False] * len(gets)
        inputs = [decode_input(value) for value in values]  # the DAG engine reports a missing input first too
    exists = await _exists(keyspace, [*graph.models, *graph.scripts], found)
    entries = list(zip(found, exists, strict=True))
    n_models = len(graph.models)
    taken = tuple((key, input_check_value(value))
                  for key, value, hit in zip(req.inputs, values, from_cache, strict=True)
                  if hit and (isinstance(value, bytes) or isinstance(value, TensorValue)))
    return (inputs, dict(zip(graph.models, entries[:n_models], strict=True)),
            dict(zip(graph.scripts, entries[n_models:], strict=True)), taken)


async def _exists(keyspace: Keyspace, keys: list[bytes], found: list[Any]) -> list[Any]:
    """EXISTS of each key whose HMGET found no field (a missing object, or a hash that is not one); 1 else."""
    unknown = [i for i, values in enumerate(found) if isinstance(values, list) and all(v is None for v in values)]
    exists: list[Any] = [1] * len(keys)
    if unknown:
        replies = await keyspace.pipeline([(b"EXISTS", keys[i]) for i in unknown])
        for i, reply in zip(unknown, replies, strict=True):
            exists[i] = reply
    return exists


async def _bind(ctx: ServerContext, keyspace: Keyspace, graph: StoredGraph, models: ObjectLookup,
                scripts: ObjectLookup) -> BoundGraph:
    """The graph tied to these versions of its objects: ops parsed in run order (the errors of a DAG with these
    ops), works loaded, steps and step-level counters built once."""
    plan, order = graph.plan, graph.plan.order
    ops = parse_ops([list(graph.ops[i].argv) for i in order], DAGEXECUTE, models, scripts, ctx.ai.models.decode_meta)
    works = await op_works(ctx, keyspace, ops)
    steps, step_of_op = build_steps(ops, [plan.op_inputs[i] for i in order], [plan.op_outputs[i] for i in order],
                                    works, ctx.metrics)
    step_of = {order[position]: step for position, step in step_of_op.items()}  # op index → step index
    op_of_step = sorted(step_of, key=step_of.__getitem__)
    deps = tuple(plan.deps[op] for op in op_of_step)
    return BoundGraph(steps, tuple(tuple(step_of[c] for c in plan.consumers[op]) for op in op_of_step), deps,
                      tuple(i for i, count in enumerate(deps) if count == 0),
                      tuple(ctx.ai.queues.queue(step.device) for step in steps), _slot_template(plan, ops),
                      _by_object(ops, step_of_op))


def _slot_template(plan: GraphPlan, ops: list[DagOp]) -> tuple[Any, ...]:
    """Every slot None but the constants' (``ops`` in run order)."""
    slots: list[Any] = [None] * plan.n_slots
    for position, op in enumerate(ops):
        if isinstance(op, TensorSetOp):
            slots[plan.op_outputs[plan.order[position]][0]] = op.tensor
    return tuple(slots)


def _by_object(ops: list[DagOp], step_of_op: dict[int, int]) -> tuple[tuple[bytes, bool, tuple[int, ...]], ...]:
    """The steps of each model and script (its AI.INFO counters are written once per run)."""
    found: dict[tuple[bytes, bool], list[int]] = {}
    for position, step_index in step_of_op.items():
        op = ops[position]
        assert isinstance(op, (ModelOp, ScriptOp))
        found.setdefault((op.key, isinstance(op, ModelOp)), []).append(step_index)
    return tuple((key, model, tuple(steps)) for (key, model), steps in found.items())
