"""Metrics hooks: what the rest of the server calls, whether or not Prometheus metrics are on.

``ServerContext.metrics`` is a ``Metrics``. With ``--metrics-port`` 0 (the default) it is this do-nothing
base class and prometheus_client is never imported; with a port, ``make_metrics`` (server/app.py) imports
``server.ops.prometheus`` lazily and returns its ``PrometheusMetrics``, whose ``scrape`` the HTTP endpoint of that
port serves at ``/metrics`` (server/ops/http.py, beside ``/healthz`` and ``/readyz``).

Hooks (cheap, safe to call from any thread):

* ``observe_batch(key, size, device)`` — the batching code calls it once per batched model run, with the
  model key, the number of requests merged into the batch and the device queue name.
* ``observe_run(key, stats, result)`` — installed as ``AIState.on_run``: called after every model or script
  op that ran (latency histogram, error counter).
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dag.runinfo import StepResult
    from server.ai.state import AIState, RunStats
    from server.config import Config
    from server.ops.banner import StoreVersion
    from server.ops.stats import Stats
    from server.store.keyspace import Keyspace
    from server.store.session import Store


class ObservedServer(Protocol):
    """What the metrics read of a server (``ServerContext`` is one): ops sits below the command layer, so it
    names the parts it reads instead of importing the context."""

    config: Config
    ai: AIState
    stats: Stats
    store: Store
    store_version: StoreVersion
    shutting_down: bool

    @property
    def clients(self) -> Sized: ...

    def keyspace(self, db: int) -> Keyspace: ...


class Metrics:
    """Metrics off: every hook does nothing."""

    enabled = False
    port = 0
    content_type = "text/plain; charset=utf-8"

    def observe_batch(self, key: bytes, size: int, device: str) -> None:
        """One batched run of model ``key`` on ``device`` that merged ``size`` requests."""

    def observe_run(self, key: bytes, stats: RunStats | None, result: StepResult) -> None:
        """One model/script op that ran (``result.ok``) or failed (``result.error``)."""

    def forget(self, key: bytes) -> None:
        """The model or script ``key`` was deleted or re-stored: drop its series (bounded label sets)."""

    def scrape(self) -> bytes:
        """The exposition text of ``/metrics`` (nothing when off)."""
        return b""
