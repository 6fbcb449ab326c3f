"""The one execute path of a single AI.MODELEXECUTE / AI.SCRIPTEXECUTE (and their deprecated RUN forms).

Each runs as a one-op DAG (house rule 2): the handler reads its object and inputs and says what differs
(``SingleOp``); this module builds the run, queues it, counts it in AI.INFO, answers TIMEDOUT or the op's
error, writes the outputs with the counters in one atomic round trip, and replies OK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import Tensor
from dag.runinfo import BatchSpec, RunInfo, Step, Work
from server.ai.execution import execute_run
from server.ai.state import AIState
from server.ai.steps import deadline_after, step_samples
from server.ai.tensor_io import write_outputs
from server.protocol.reply import OK, Status
from server.store.atomic import STALE_PREFIXES, ScriptCall
from server.store.keyspace import Keyspace


class SingleOp:
    """One model or script call, its object read and its inputs decoded: the parts that differ between them.

    ``samples``: AI.INFO counts dim 0 of the first output (models; scripts count none). ``record``: False on
    a model's second run after STALEMODEL (the first was counted). ``digest``: the model's; the write then
    checks the store still holds that model, and ``cached_inputs`` (key, ``input_check_value``) that those
    inputs, taken from the coherent cache, still hold what the run used; ``again`` (when given) answers
    instead if not.
    Immutable; a plain class (one a request) because mypyc compiles its ``__init__``, not a dataclass's.
    """

    __slots__ = (
        "again",
        "batch",
        "cached_inputs",
        "device",
        "digest",
        "inputs",
        "key",
        "outputs",
        "record",
        "samples",
        "timeout_ms",
        "work",
    )

    def __init__(self, key: bytes, device: str, work: Work, inputs: list[Tensor], outputs: tuple[bytes, ...],
                 timeout_ms: int | None, batch: BatchSpec | None = None, samples: bool = False,
                 record: bool = True, digest: str | None = None,
                 cached_inputs: tuple[tuple[bytes, bytes], ...] = (),
                 again: Callable[[], Awaitable[Any]] | None = None) -> None:
        self.key: Final = key
        self.device: Final = device
        self.work: Final = work
        self.inputs: Final = inputs
        self.outputs: Final = outputs
        self.timeout_ms: Final = timeout_ms
        self.batch: Final = batch
        self.samples: Final = samples
        self.record: Final = record
        self.digest: Final = digest
        self.cached_inputs: Final = cached_inputs
        self.again: Final = again


def one_op_run(device: str, work: Work, inputs: list[Tensor], n_outputs: int, timeout_ms: int | None,
               batch: BatchSpec | None = None) -> RunInfo:
    """A single call as a one-op DAG on ``device``: inputs in slots 0..n-1, outputs after them."""
    n_in = len(inputs)
    step = Step(0, device, tuple(range(n_in)), tuple(range(n_in, n_in + n_outputs)), work, batch)
    return RunInfo([step], [*inputs, *([None] * n_outputs)], deadline=deadline_after(timeout_ms))


async def execute_single_op(ai: AIState, keyspace: Keyspace, op: SingleOp) -> Any:
    """Run ``op`` and reply: the op's error or TIMEDOUT (with the AI.INFO counters written), else OK once
    the outputs and the counters are written together."""
    run = one_op_run(op.device, op.work, op.inputs, len(op.outputs), op.timeout_ms, op.batch)
    await execute_run(ai.queues, run, ai.inline)
    samples = step_samples(run, 0) if op.samples else 0
    counters = ai.record(op.key, run.results[0], samples, keyspace.stats_key) if op.record else []
    if run.timed_out or run.error is not None:
        current = await _inputs_still_current(keyspace, op, counters)
        if not current and op.again is not None:  # the error or TIMEDOUT came from an input changed meanwhile
            return await op.again()
        if run.error is not None:
            raise run.error
        return Status(msgs.TIMEDOUT_STATUS)
    return await _write(keyspace, op, run, counters)


async def _inputs_still_current(keyspace: Keyspace, op: SingleOp, counters: list[ScriptCall]) -> bool:
    """Write ``counters``; when the run may run again, check in the same round trip that the store still holds
    the model it ran (its digest) and the inputs it took from the coherent cache: False if one changed, so that
    no error or TIMEDOUT computed from a stale model or value is answered (the model's cached metadata is as
    stale as an input when a push is still on its way)."""
    model = (op.key, op.digest) if op.digest is not None else None
    if op.again is None or (model is None and not op.cached_inputs):
        await keyspace.run_scripts(counters)
        return True
    try:
        await keyspace.set_tensors([], [], also=counters, model=model, inputs=op.cached_inputs)
    except AIError as exc:
        if exc.message.startswith(STALE_PREFIXES):
            return False
        raise
    return True


async def _write(keyspace: Keyspace, op: SingleOp, run: RunInfo, counters: list[ScriptCall]) -> Any:
    """The outputs and counters in one atomic step; STALEMODEL / STALEINPUT (another model or input stored
    meanwhile) goes to ``op.again`` when there is one, as does any other error of a run whose cached inputs
    changed meanwhile."""
    model = (op.key, op.digest) if op.digest is not None else None
    try:
        await write_outputs(keyspace, op.outputs, run.slots[len(op.inputs) :], counters, model, op.cached_inputs)
    except AIError as exc:
        if op.again is None:
            raise
        if exc.message.startswith(STALE_PREFIXES) or not await _inputs_still_current(keyspace, op, []):
            return await op.again()
        raise  # e.g. an output that cannot be encoded, from inputs still current
    return OK
