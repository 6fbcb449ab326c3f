"""The AI part of the server's state: settings (AI.CONFIG), device queues, backends, loaded models, stats."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from backends.base import GraphNames, LoadedModel, RuntimeOptions
from backends.objects import MODEL_MARKER, ModelMeta, decode_model_meta
from backends.registry import BackendRegistry, default_backends_path
from dag.inline import InlinePolicy
from dag.manager import QueueManager
from dag.runinfo import StepResult
from server.ai.graphs import GraphCache, Reaper
from server.ai.handle_cache import HandleCache
from server.ai.script_cache import ScriptCache
from server.ai.tensor_io import DecodedInputs
from server.config import Config
from server.store.atomic import ScriptCall, record_run_call, stats_key

MODEL_CACHE_CAPACITY: Final = 64

log: Final = logging.getLogger("redisai.run")


@dataclass(slots=True)
class AISettings:
    """Run-time tunable settings (RedisAI's AI.CONFIG parameters)."""

    model_chunk_size: int
    intra_op_threads: int
    inter_op_threads: int
    execution_timeout_ms: int
    backends_path: str = ""
    backend_memory_limit: int = 0
    script_allow_ops: frozenset[str] = frozenset()  # --script-allow-ops (backends/script_ops.py)

    def runtime_options(self) -> RuntimeOptions:
        """INTRA_OP_PARALLELISM 0 (the default) means one thread inside each op, per worker thread."""
        return RuntimeOptions(self.intra_op_threads or 1, self.inter_op_threads, self.execution_timeout_ms)


@dataclass(slots=True)
class RunStats:
    """One AI.INFO record: registered when a model or script is stored, updated after every run."""

    key: bytes
    kind: str  # "MODEL" or "SCRIPT"
    backend: str
    device: str
    tag: bytes
    duration_us: int = 0
    samples: int = 0
    calls: int = 0
    errors: int = 0


DECODED_META_CAPACITY: Final = 1024  # decoded model metadata remembered (ModelCache.decode_meta)


class ModelCache(HandleCache[ModelMeta, LoadedModel]):
    """Loaded models by (backend, device queue, blob digest) — see server/ai/handle_cache.py."""

    def __init__(self, backends: BackendRegistry, settings: AISettings, capacity: int = MODEL_CACHE_CAPACITY) -> None:
        super().__init__(capacity)
        self._backends = backends
        self._settings = settings
        self._decoded: dict[tuple[Any, ...], ModelMeta] = {}

    def decode_meta(self, values: Any, exists: Any) -> ModelMeta | None:
        """``decode_model_meta`` (backends/objects.py), remembered by the raw HMGET values: every run of a
        model reads the same values (from the coherent cache), and decoding them (two JSON lists, a device
        string) cost more than the rest of reading them. The values are the key, so a changed model is a
        new entry, never a stale one; at most DECODED_META_CAPACITY entries, then it starts over."""
        if not exists or not isinstance(values, list) or not values or values[0] != MODEL_MARKER:
            return decode_model_meta(values, exists)  # missing or not a model: None, or WRONGTYPE raised
        key = tuple(values)
        meta = self._decoded.get(key)
        if meta is None:
            meta = decode_model_meta(values, exists)
            if meta is not None:
                if len(self._decoded) >= DECODED_META_CAPACITY:
                    self._decoded.clear()
                self._decoded[key] = meta
        return meta

    def cache_key(self, meta: ModelMeta) -> tuple[str, str, str, tuple[str, ...], tuple[str, ...]]:
        """The names too: one TF GraphDef stored twice with other INPUTS/OUTPUTS is two different models."""
        return meta.backend, meta.device.queue_name, meta.digest, meta.inputs, meta.outputs

    async def build(self, meta: ModelMeta, payload: bytes) -> LoadedModel:
        return await self.load(meta, payload)

    def describe(self, meta: ModelMeta) -> tuple[str, str, str]:
        return "model", meta.backend, meta.device.text

    async def load(self, meta: ModelMeta, blob: bytes) -> LoadedModel:
        """Build a model from its blob in a worker thread (validating it), without caching it."""
        options = self._settings.runtime_options()
        return await asyncio.to_thread(self._load_now, meta, blob, options)

    def _load_now(self, meta: ModelMeta, blob: bytes, options: RuntimeOptions) -> LoadedModel:
        """On a worker thread: importing a runtime the first time takes a second; the loop never waits for it."""
        names = GraphNames(meta.inputs, meta.outputs)  # only TF uses them (its INPUTS/OUTPUTS)
        return self._backends.get(meta.backend).load_model(blob, meta.device, options, names)


@dataclass
class AIState:
    """Owned by the ServerContext; built once at start from the Config."""

    settings: AISettings
    queues: QueueManager
    inline: InlinePolicy = field(default_factory=lambda: InlinePolicy(0))  # small ops on the loop thread
    backends: BackendRegistry = field(default_factory=BackendRegistry)
    stats: dict[bytes, RunStats] = field(default_factory=dict)
    models: ModelCache = field(init=False)
    scripts: ScriptCache = field(init=False)  # compiled scripts (server/ai/script_cache.py)
    graphs: GraphCache = field(default_factory=GraphCache)  # decoded stored graphs (server/ai/graphs.py)
    reaper: Reaper = field(default_factory=Reaper)  # finished graph runs, let go after their reply
    decoded: DecodedInputs = field(default_factory=DecodedInputs)  # cached inputs, decoded (server/ai/tensor_io.py)
    runs: int = 0  # model/script ops that ran since start (INFO ai); RESETSTAT leaves these alone
    run_errors: int = 0
    on_run: Callable[[bytes, RunStats | None, StepResult], None] | None = None  # metrics hook (server/ops/metrics.py)

    def __post_init__(self) -> None:
        self.models = ModelCache(self.backends, self.settings)
        self.scripts = ScriptCache(intra_op_threads=self.settings.runtime_options().intra_op_threads,
                                   allow_ops=self.settings.script_allow_ops)

    def record(self, key: bytes, result: StepResult, samples: int,
               counters_at: Callable[[bytes], bytes] = stats_key) -> list[ScriptCall]:
        """AI.INFO bookkeeping after a run (REDISAI-REFERENCE §2.14): a success adds its duration, samples
        and a call; a failure adds a call and an error; an op that never ran adds nothing. Returns the update
        of the store's counters (server/store/atomic.py RECORD_RUN) for the caller's next round trip; this
        process's own record (metrics labels, INFO ai) is updated here. ``counters_at``: where the store keeps
        a key's counters (``Keyspace.stats_key``: on a cluster, in the key's own slot)."""
        stats = self.stats.get(key)
        self._count_run(key, stats, result)
        added = _counts(result, samples)
        if added is None:
            return []
        return [self._counted(key, stats, added, counters_at)]  # one run: record_many's loop and sums left out

    def record_many(self, key: bytes, runs: list[tuple[StepResult, int]],
                    counters_at: Callable[[bytes], bytes] = stats_key) -> list[ScriptCall]:
        """``record`` for several runs of one object (a graph running one model in several ops): each counted
        here as one run, the store's counters updated by one call with their sums."""
        stats = self.stats.get(key)
        totals = [0, 0, 0, 0]
        for result, samples in runs:
            self._count_run(key, stats, result)
            added = _counts(result, samples)
            if added is not None:
                for i, value in enumerate(added):
                    totals[i] += value
        if not totals[0]:
            return []
        return [self._counted(key, stats, (totals[0], totals[1], totals[2], totals[3]), counters_at)]

    @staticmethod
    def _counted(key: bytes, stats: RunStats | None, added: tuple[int, int, int, int],
                 counters_at: Callable[[bytes], bytes]) -> ScriptCall:
        """``added`` (calls, duration µs, samples, errors) in this process's record, and the store's update."""
        if stats is not None:
            stats.calls += added[0]
            stats.duration_us += added[1]
            stats.samples += added[2]
            stats.errors += added[3]
        return record_run_call(counters_at(key), *added)

    def _count_run(self, key: bytes, stats: RunStats | None, result: StepResult) -> None:
        """Server-wide run counters (INFO ai) and the metrics hook; an op that never ran is not counted."""
        if not result.ok and result.error is None:
            return
        self.runs += 1
        if result.error is not None:
            self.run_errors += 1
            if log.isEnabledFor(logging.INFO):
                fields = {"key": key, "type": stats.kind if stats else "", "device": stats.device if stats else "",
                          "error": str(result.error)}
                log.info("run failed", extra={"fields": fields})
        if self.on_run is not None:
            self.on_run(key, stats, result)

    @classmethod
    def from_config(cls, config: Config) -> AIState:
        settings = AISettings(config.model_chunk_size, config.intra_op_parallelism, config.inter_op_parallelism,
                              config.model_execution_timeout, config.backends_path or default_backends_path(),
                              config.backend_memory_limit, frozenset(config.script_allow_ops.split()))
        inline = InlinePolicy(config.inline_op_us if settings.runtime_options().intra_op_threads == 1 else 0)
        queues = QueueManager(config.threads_per_queue, config.script_execution_timeout, gpu_lanes=config.gpu_lanes,
                              cuda_graphs=config.cuda_graphs)
        return cls(settings, queues, inline)


def _counts(result: StepResult, samples: int) -> tuple[int, int, int, int] | None:
    """What one run adds to AI.INFO (calls, duration µs, samples, errors): a success its duration, samples and a
    call; a failure a call and an error; an op that never ran nothing (None)."""
    if result.ok:
        return 1, result.duration_us, samples, 0
    if result.error is not None:
        return 1, 0, 0, 1
    return None
