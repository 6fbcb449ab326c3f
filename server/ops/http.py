"""The HTTP port of ``--metrics-port``: ``/metrics``, ``/healthz`` and ``/readyz``.

Usage: ``redisai-server --metrics-port 9121``, then

* ``GET /healthz`` → ``200 ok``: the process is alive and its event loop answers (nothing else is asked);
* ``GET /readyz`` → ``200 ready``, or ``503 not ready: <reason>`` (server/ops/health.py: the store, the stored
  models' backends, a shutdown under way);
* ``GET /metrics`` (or ``/``) → the Prometheus exposition text (404 when prometheus_client is not installed).

A minimal HTTP/1.1 handler on the server's own event loop, one request per connection, plain HTTP on the bind
addresses: it carries no keys and needs no password, so probes work whatever TLS and AUTH the RESP port uses.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from server.ops.health import Health

if TYPE_CHECKING:
    from server.ops.metrics import Metrics

log = logging.getLogger("redisai.metrics")

REQUEST_READ_TIMEOUT = 10.0
TEXT = b"text/plain; charset=utf-8"


class OpsEndpoint:
    """The listener(s) of the metrics port and its three routes."""

    def __init__(self, hosts: list[str], port: int, metrics: Metrics, health: Health) -> None:
        self.hosts = hosts or ["127.0.0.1"]
        self.port = port
        self.metrics = metrics
        self.health = health
        self._listeners: list[asyncio.Server] = []

    @property
    def url(self) -> str:
        return f"http://{self.hosts[0]}:{self.port}"

    async def start(self) -> None:
        for host in self.hosts:
            self._listeners.append(await asyncio.start_server(self._handle, host, self.port, reuse_address=True))
        log.info("metrics at %s/metrics, health at /healthz and /readyz", self.url)

    async def stop(self) -> None:
        for listener in self._listeners:
            listener.close()
        for listener in self._listeners:
            await listener.wait_closed()
        self._listeners.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_READ_TIMEOUT)
            writer.write(await self._response(head.split(b"\r\n", 1)[0].split()))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _response(self, request_line: list[bytes]) -> bytes:
        method, path = [*request_line, b"", b""][:2]
        route = path.split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return http_response(b"405 Method Not Allowed", TEXT, b"GET or HEAD\n", method)
        if route == b"/healthz":
            return http_response(b"200 OK", TEXT, b"ok\n", method)
        if route == b"/readyz":
            verdict = await self.health.readiness()
            if verdict.ready:
                return http_response(b"200 OK", TEXT, b"ready\n", method)
            return http_response(b"503 Service Unavailable", TEXT, f"not ready: {verdict.reason}\n".encode(), method)
        if route in (b"/metrics", b"/") and self.metrics.enabled:
            return http_response(b"200 OK", self.metrics.content_type.encode(), self.metrics.scrape(), method)
        return http_response(b"404 Not Found", TEXT, b"not found; try /metrics, /healthz or /readyz\n", method)


def http_response(status: bytes, content_type: bytes, body: bytes, method: bytes) -> bytes:
    head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        status, content_type, len(body))
    return head if method == b"HEAD" else head + body
