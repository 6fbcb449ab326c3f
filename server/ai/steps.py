"""The parts of a run that a single MODELEXECUTE/SCRIPTEXECUTE and a DAG build alike: the deadline, a model
step's batching, a script step's work, and the samples AI.INFO counts for a model step.

The server layers above (metrics, the command handlers) are reached through the small protocols here, so
this layer imports neither.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Final, Protocol

from backends.objects import ModelMeta, ScriptMeta
from dag.batching import BatchPolicy
from dag.runinfo import BatchSpec, RunInfo
from dag.script_work import ScriptWork
from server.ai.script_host import LoopScriptHost
from server.ai.state import ModelCache
from server.store.keyspace import Keyspace

# time's functions as module constants: compiled, a call of ``time.x()`` looks ``x`` up on the module each time
_monotonic: Final = time.monotonic

if TYPE_CHECKING:
    from backends.script_backend import CompiledScript


class BatchObserver(Protocol):
    """What batching needs of the metrics (server/ops/metrics.py ``Metrics``): whether they are on, and the
    hook told the size of every batch that ran."""

    @property
    def enabled(self) -> bool: ...

    def observe_batch(self, key: bytes, size: int, device: str) -> None: ...


class ScriptCallArgs(Protocol):
    """What a script op calls (server/commands/script_args.py ``ScriptExecuteRequest``)."""

    @property
    def function(self) -> str: ...

    @property
    def keys(self) -> tuple[bytes, ...]: ...

    @property
    def args(self) -> tuple[bytes, ...]: ...

    @property
    def outputs(self) -> tuple[bytes, ...]: ...


def deadline_after(timeout_ms: int | None) -> float | None:
    """A run's deadline (``_monotonic()`` seconds) for a TIMEOUT in ms; None (or 0): no deadline."""
    return _monotonic() + timeout_ms / 1000 if timeout_ms else None


def batch_spec(meta: ModelMeta, key: bytes, metrics: BatchObserver) -> BatchSpec | None:
    """Auto-batching for a model stored with BATCHSIZE > 0: partners must use the very same loaded model."""
    if meta.batchsize <= 0:
        return None
    policy = BatchPolicy(meta.batchsize, meta.minbatchsize, meta.minbatchtimeout)
    device = meta.device.queue_name
    on_batch = (lambda size: metrics.observe_batch(key, size, device)) if metrics.enabled else None
    return BatchSpec(policy, (meta.backend, device, meta.digest), on_batch)


def script_work(meta: ScriptMeta, compiled: CompiledScript, call: ScriptCallArgs, store: Keyspace,
                models: ModelCache) -> ScriptWork:
    """The Work of one script op (call from the event loop): entry-point convention when the function is one
    of the script's ENTRY_POINTS, and redis/redisAI calls reaching ``store`` (database 0) and ``models``."""
    return ScriptWork(compiled, call.function, entry_point=call.function in meta.entry_points,
                      n_outputs=len(call.outputs), keys=call.keys, args=call.args,
                      host=LoopScriptHost(asyncio.get_running_loop(), store, models))


def step_samples(run: RunInfo, step_index: int) -> int:
    """AI.INFO samples of a model step: dim 0 of its first output, 0 without one, as RedisAI counts them."""
    outputs = run.steps[step_index].outputs
    first = run.slots[outputs[0]] if outputs else None
    return first.shape[0] if first is not None and first.shape else 0
