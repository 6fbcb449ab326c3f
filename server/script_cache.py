"""Compiled scripts, cached in the server process like loaded models (server/ai.py ModelCache).

Keyed by (device queue, source digest), not by key name: a script replaced through another server or directly
in Redis has a new digest and is compiled afresh, never served stale; the same source stored under two keys is
compiled once. Compiling runs off the event loop, once per digest even when several clients ask at the same
time; the torch script backend is imported there too, on first use (``import server`` must not import torch).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from backends import errors as msgs
from backends.device import Device
from backends.errors import AIError
from backends.objects import ScriptMeta

if TYPE_CHECKING:
    from backends.script_backend import CompiledScript

SCRIPT_CACHE_CAPACITY = 64

CacheKey = tuple[str, str]


def compile_now(source: bytes, device: Device, entry_points: Sequence[str]) -> CompiledScript:
    """Compile on the calling thread (a worker thread: see ``ScriptCache.compile``)."""
    try:
        from backends import script_backend
    except ImportError as exc:
        raise AIError(msgs.COULD_NOT_LOAD_BACKEND_MSG) from exc
    return script_backend.compile_script(source, device, entry_points)


class ScriptCache:
    """Compiled scripts by (device queue, source digest), least recently used first out."""

    def __init__(self, capacity: int = SCRIPT_CACHE_CAPACITY) -> None:
        self._capacity = capacity
        self._compiled: OrderedDict[CacheKey, CompiledScript] = OrderedDict()
        self._compiling: dict[CacheKey, asyncio.Future[CompiledScript]] = {}

    @staticmethod
    def cache_key(meta: ScriptMeta) -> CacheKey:
        return meta.device.queue_name, meta.digest

    def lookup(self, meta: ScriptMeta) -> CompiledScript | None:
        key = self.cache_key(meta)
        compiled = self._compiled.get(key)
        if compiled is not None:
            self._compiled.move_to_end(key)
        return compiled

    def put(self, meta: ScriptMeta, compiled: CompiledScript) -> None:
        key = self.cache_key(meta)
        self._compiled[key] = compiled
        self._compiled.move_to_end(key)
        while len(self._compiled) > self._capacity:
            self._compiled.popitem(last=False)

    async def compile(self, source: bytes, device: Device, entry_points: Sequence[str]) -> CompiledScript:
        """Compile ``source`` in a worker thread (checking its entry points), without caching it."""
        return await asyncio.to_thread(compile_now, source, device, tuple(entry_points))

    async def get(self, meta: ScriptMeta, fetch_source: Callable[[], Awaitable[bytes]]) -> CompiledScript:
        """The compiled script for ``meta``, compiling it (source fetched on demand) when not cached."""
        cached = self.lookup(meta)
        if cached is not None:
            return cached
        key = self.cache_key(meta)
        pending = self._compiling.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[CompiledScript] = asyncio.get_running_loop().create_future()
        self._compiling[key] = future
        try:
            compiled = await self.compile(await fetch_source(), meta.device, meta.entry_points)
            self.put(meta, compiled)
            future.set_result(compiled)
            return compiled
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it, nobody logs "never retrieved"
            raise
        finally:
            del self._compiling[key]
