"""Stored graphs in this process: decoded once per digest, bound once per version of their models and scripts.

A stored graph (server/commands/graph_store.py) is decoded into a ``StoredGraph`` the first time a run
sees its digest, and kept, as loaded models are kept by theirs: every server sharing the store runs the
same graph from the same hash. A ``BoundGraph`` is a stored graph tied to the models and scripts its ops
name as they are now (their metadata as read): the ops parsed against them, the steps built once (works,
devices, batching), the per-step counters and consumer lists, the slots with the constants in. A model
replaced in the store reads back other metadata, so the next run binds anew: it is picked up at once.

Runs share a bound graph's steps (they hold no per-run state); each run has its own RunInfo (slots,
results) and its own counters. ``Reaper`` drops a finished run's state after its reply is on its way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dag.graph_plan import GraphOpSpec, GraphPlan
from dag.inline import GraphCosts
from dag.queues import DeviceQueue
from dag.runinfo import Step
from server.ai.graph_fusion import GraphFusion

GRAPHS_CAPACITY = 256  # decoded graphs kept per process
BINDINGS_CAPACITY = 8  # bindings kept per graph (one per set of model and script versions seen)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A dict that forgets its oldest entry past ``capacity`` (least recently added; entries are immutable)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> V:
        if key not in self._items and len(self._items) >= self.capacity:
            del self._items[next(iter(self._items))]
        self._items[key] = value
        return value

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True, eq=False)
class BoundGraph:
    """A graph bound to its objects' current versions (see the module docstring). Steps are in run order
    (``StoredGraph.plan.order``); ``consumers`` and ``deps`` are per step."""

    steps: list[Step]
    consumers: tuple[tuple[int, ...], ...]
    deps: tuple[int, ...]
    roots: tuple[int, ...]
    queues: tuple[DeviceQueue, ...]
    slots: tuple[Any, ...]  # the slot template: constants in, everything else None
    by_object: tuple[tuple[bytes, bool, tuple[int, ...]], ...]  # (key, is a model, its steps): AI.INFO counters
    costs: GraphCosts = field(default_factory=GraphCosts)
    fusion: GraphFusion = field(default_factory=GraphFusion)  # its ops as one call, when they allow it


@dataclass(frozen=True, slots=True, eq=False)
class StoredGraph:
    """A graph as stored, decoded: ``source`` is AI.GRAPHSTORE's arguments after the key, ``ops`` in op order,
    ``models`` / ``scripts`` the distinct object keys its ops name (read before every run)."""

    digest: str
    tag: bytes
    inputs: tuple[bytes, ...]
    outputs: tuple[bytes, ...]
    ops: tuple[GraphOpSpec, ...]
    plan: GraphPlan
    models: tuple[bytes, ...]
    scripts: tuple[bytes, ...]
    source: tuple[bytes, ...]
    bindings: Bounded[Hashable, BoundGraph] = field(default_factory=lambda: Bounded(BINDINGS_CAPACITY))


class GraphCache:
    """Decoded graphs by digest (owned by AIState)."""

    def __init__(self, capacity: int = GRAPHS_CAPACITY) -> None:
        self._graphs: Bounded[str, StoredGraph] = Bounded(capacity)
        self.compiled_runs = 0  # INFO ai_graph_runs: runs of either mode since start
        self.interpreted_runs = 0

    def get(self, digest: str) -> StoredGraph | None:
        return self._graphs.get(digest)

    def put(self, graph: StoredGraph) -> StoredGraph:
        return self._graphs.put(graph.digest, graph)

    def __len__(self) -> int:
        return len(self._graphs)


class Reaper:
    """Per-run state (slots, results, counters) let go after the reply was handed to the connection, on a later
    turn of the event loop: freeing a run's tensors is off the reply's path (Realm's background reaper)."""

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self.reaped = 0

    def defer(self, *objects: Any) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._collect)
        self._pending.extend(objects)

    def _collect(self) -> None:
        pending, self._pending = self._pending, []
        self.reaped += len(pending)
        pending.clear()
