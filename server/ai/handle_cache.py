"""Built handles (loaded models, compiled scripts) cached by content, least recently used first out.

Keyed by the stored object's digest, not by its key name: an object replaced through another server or
directly in Redis has a new digest and is built afresh, never served stale. Building runs off the event loop
(in a thread), once per key even when several clients ask at the same time. Each build is logged at notice
(``model loaded key=… backend=… device=… size=… load_ms=…``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

MetaT = TypeVar("MetaT")
HandleT = TypeVar("HandleT")

log = logging.getLogger("redisai.cache")


class HandleCache(ABC, Generic[MetaT, HandleT]):
    """What a model cache and a script cache share; subclasses say how to key and how to build."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._built: OrderedDict[Hashable, HandleT] = OrderedDict()
        self._building: dict[Hashable, asyncio.Task[HandleT]] = {}
        self.on_loaded: Callable[[bytes, str, str, str], None] | None = None  # (key, kind, backend, device) of a build

    @abstractmethod
    def cache_key(self, meta: MetaT) -> Hashable:
        """What identifies a built handle: the stored object's digest (and device, backend)."""

    @abstractmethod
    async def build(self, meta: MetaT, payload: bytes) -> HandleT:
        """Build the handle from the stored payload (blob or source), in a thread."""

    @abstractmethod
    def describe(self, meta: MetaT) -> tuple[str, str, str]:
        """(kind, backend, device) of a stored object, for the log line of its build."""

    def lookup(self, meta: MetaT) -> HandleT | None:
        key = self.cache_key(meta)
        handle = self._built.get(key)
        if handle is not None:
            self._built.move_to_end(key)
        return handle

    def put(self, meta: MetaT, handle: HandleT) -> None:
        key = self.cache_key(meta)
        self._built[key] = handle
        self._built.move_to_end(key)
        while len(self._built) > self._capacity:
            self._built.popitem(last=False)

    async def get(self, meta: MetaT, fetch: Callable[[], Awaitable[bytes]], stored_at: bytes = b"") -> HandleT:
        """The handle for ``meta`` (stored at key ``stored_at``), built (payload fetched on demand) when not cached.

        The build runs in its own task, shared by everyone asking for the same key; a caller that is
        cancelled (its client went away) stops waiting, but never cancels the build the others wait for.
        """
        cached = self.lookup(meta)
        if cached is not None:
            return cached
        key = self.cache_key(meta)
        task = self._building.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._build_and_keep(meta, fetch, stored_at))
            self._building[key] = task
            task.add_done_callback(functools.partial(self._forget, key))
        return await asyncio.shield(task)

    async def _build_and_keep(self, meta: MetaT, fetch: Callable[[], Awaitable[bytes]], key: bytes) -> HandleT:
        payload = await fetch()
        started = time.perf_counter()
        handle = await self.build(meta, payload)
        self.put(meta, handle)
        if self.on_loaded is not None:  # (server/app.py: this process's labels of an object stored by another)
            self.on_loaded(key, *self.describe(meta))
        if log.isEnabledFor(logging.INFO):
            kind, backend, device = self.describe(meta)
            log.info("%s loaded", kind, extra={"fields": {
                "key": key, "backend": backend, "device": device, "size": len(payload),
                "load_ms": round((time.perf_counter() - started) * 1000, 1)}})
        return handle

    def _forget(self, key: Hashable, done: asyncio.Task[HandleT]) -> None:
        if self._building.get(key) is done:
            del self._building[key]
        if not done.cancelled():
            done.exception()  # retrieved: the waiters get it, nobody logs "never retrieved"
