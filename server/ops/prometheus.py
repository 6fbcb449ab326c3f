"""Prometheus metrics on ``--metrics-port`` (imported only when that port is set).

Everything hangs off one ``CollectorRegistry`` owned by this object (never the process-wide default
registry, so two servers in one process never share counters). State the event loop already keeps — calls,
time and errors of our commands (``ctx.stats.commands``), connected clients, device queues, run totals — is
read at scrape time by a collector, so the request path pays nothing for it. What only exists at the
moment it happens — run latencies and batch sizes — goes into histograms through the hooks of
``server.ops.metrics.Metrics``. The process's own series (``process_cpu_seconds_total``, resident and virtual
memory, open fds, start time) come from prometheus_client's ProcessCollector, and ``redisai_build_info`` says
which server, RedisAI command set, Python and store answer.

With ``--metrics-key-label no`` the run and batch series have no ``key`` label: one series per type and device
however many models a client stores under generated names.

``scrape`` is served by the HTTP endpoint (server/ops/http.py) on the server's own event loop, so the collector
reads loop-owned state from the loop thread.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.config import REDISAI_COMPAT_VERSION, VERSION
from server.ops.metrics import Metrics, ObservedServer

if TYPE_CHECKING:
    from dag.runinfo import StepResult
    from server.ai.state import RunStats

RUN_SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                       5.0, 10.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _label(key: bytes) -> str:
    return key.decode(errors="backslashreplace")


class PrometheusMetrics(Metrics):
    """Metrics on: histograms fed by the hooks, the process's series, and a collector over the server's state."""

    enabled = True
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, ctx: ObservedServer) -> None:
        self.ctx = ctx
        self.keyed = ctx.config.metrics_key_label
        key = ["key"] if self.keyed else []
        self.registry = CollectorRegistry(auto_describe=True)
        self.run_seconds = Histogram("redisai_run_duration_seconds", "Execution time of model and script ops.",
                                     [*key, "type", "device"], registry=self.registry, buckets=RUN_SECONDS_BUCKETS)
        self.run_failures = Counter("redisai_run_failures", "Model and script ops that failed while running.",
                                    [*key, "type", "device"], registry=self.registry)
        self.batch_size = Histogram("redisai_batch_size", "Requests merged into one batched model run.",
                                    [*key, "device"], registry=self.registry, buckets=BATCH_SIZE_BUCKETS)
        ProcessCollector(registry=self.registry)
        self.registry.register(StateCollector(ctx))
        self._seen: dict[bytes, set[tuple[str, str, str]]] = {}  # key -> the label sets it has used
        self.port = ctx.config.metrics_port
        ctx.ai.on_run = self.observe_run

    def _key(self, key: bytes) -> tuple[str, ...]:
        return (_label(key),) if self.keyed else ()

    def observe_batch(self, key: bytes, size: int, device: str) -> None:
        if self.keyed:
            self._seen.setdefault(key, set()).add(("batch", device, ""))
        self.batch_size.labels(*self._key(key), device).observe(size)

    def observe_run(self, key: bytes, stats: RunStats | None, result: StepResult) -> None:
        kind, device = (stats.kind, stats.device.upper()) if stats is not None else ("", "")
        if self.keyed:
            self._seen.setdefault(key, set()).add(("run", device, kind))
        if result.ok:
            self.run_seconds.labels(*self._key(key), kind, device).observe(result.duration_us / 1_000_000)
        else:
            self.run_failures.labels(*self._key(key), kind, device).inc()

    def forget(self, key: bytes) -> None:
        """Drop every series of ``key`` (deleted or re-stored), so label sets stay bounded by live keys."""
        for family, device, kind in self._seen.pop(key, set()):
            try:
                if family == "batch":
                    self.batch_size.remove(_label(key), device)
                else:
                    for metric in (self.run_seconds, self.run_failures):
                        metric.remove(_label(key), kind, device)
            except KeyError:
                pass

    def scrape(self) -> bytes:
        return generate_latest(self.registry)


class StateCollector(Collector):
    """Reads the server's own counters at scrape time (on the event-loop thread)."""

    def __init__(self, ctx: ObservedServer) -> None:
        self.ctx = ctx

    def collect(self) -> Iterable[Metric]:
        yield from self._commands()
        yield from self._queues()
        ai = self.ctx.ai
        yield CounterMetricFamily("redisai_runs", "Model and script ops run since start.", value=ai.runs)
        yield CounterMetricFamily("redisai_run_errors", "Model and script ops failed since start.", value=ai.run_errors)
        yield GaugeMetricFamily("redisai_connected_clients", "Client connections open.", value=len(self.ctx.clients))
        yield self._build_info()

    def _build_info(self) -> Metric:
        info = GaugeMetricFamily("redisai_build_info", "Always 1: the server, RedisAI command set, Python and "
                                 "store versions as labels.",
                                 labels=["version", "redisai_version", "python_version", "store", "store_version"])
        store = self.ctx.store_version
        info.add_metric([VERSION, REDISAI_COMPAT_VERSION, platform.python_version(), store.name or "unknown",
                         store.version or "unknown"], 1)
        return info

    def _commands(self) -> Iterable[Metric]:
        requests = CounterMetricFamily("redisai_requests", "Calls of our commands.", labels=["command"])
        errors = CounterMetricFamily("redisai_request_errors", "Calls of our commands answered with an error.",
                                     labels=["command"])
        seconds = CounterMetricFamily("redisai_request_seconds", "Time spent in our commands, waiting for "
                                      "workers included.", labels=["command"])
        for name, stat in sorted(self.ctx.stats.commands.items()):
            requests.add_metric([name], stat.calls)
            errors.add_metric([name], stat.failed)
            seconds.add_metric([name], stat.usec / 1_000_000)
        return requests, errors, seconds

    def _queues(self) -> Iterable[Metric]:
        manager = self.ctx.ai.queues
        depth = GaugeMetricFamily("redisai_queue_depth", "Tickets waiting in a device queue.", labels=["device"])
        threads = GaugeMetricFamily("redisai_queue_threads", "Worker threads of a device queue.", labels=["device"])
        busy = CounterMetricFamily("redisai_queue_busy_seconds", "Time a device's workers spent executing ops.",
                                   labels=["device"])
        executed = CounterMetricFamily("redisai_queue_executed_steps", "Ops a device's workers executed.",
                                       labels=["device"])
        for queue in list(manager.queues.values()):
            depth.add_metric([queue.name], len(queue))
            threads.add_metric([queue.name], manager.threads_for(queue.name))
            busy.add_metric([queue.name], queue.busy_seconds)
            executed.add_metric([queue.name], queue.executed)
        return depth, threads, busy, executed
