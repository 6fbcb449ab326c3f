"""Compiled scripts, cached in the server process like loaded models (server/ai/state.py ModelCache).

Keyed by (device queue, source digest), not by key name: a script replaced through another server or directly
in Redis has a new digest and is compiled afresh, never served stale; the same source stored under two keys is
compiled once. Compiling runs off the event loop, once per digest even when several clients ask at the same
time; the torch script backend is imported there too, on first use (``import server`` must not import torch).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from backends import errors as msgs
from backends.device import Device
from backends.errors import AIError
from backends.objects import ScriptMeta
from server.ai.handle_cache import HandleCache

if TYPE_CHECKING:
    from backends.script_backend import CompiledScript

SCRIPT_CACHE_CAPACITY = 64

CacheKey = tuple[str, str]
T = TypeVar("T")


def compile_now(source: bytes, device: Device, entry_points: Sequence[str], intra_op_threads: int = 1,
                allow_ops: frozenset[str] = frozenset()) -> CompiledScript:
    """Compile on the calling thread (a worker thread: see ``ScriptCache.compile``); ``allow_ops``: ops allowed
    besides the built-in list (--script-allow-ops)."""
    try:
        from backends import script_backend
    except ImportError as exc:
        raise AIError(msgs.COULD_NOT_LOAD_BACKEND_MSG) from exc
    return script_backend.compile_script(source, device, entry_points, intra_op_threads, allow_ops)


COMPILE_STACK_BYTES = 512 * 1024 * 1024


def on_big_stack(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on a thread with a large stack (reserved, not committed): TorchScript's parser recurses
    once per nesting level, and a deeply nested source would otherwise overflow a normal thread's stack and
    crash the whole server."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:
            outcome["error"] = exc

    previous = threading.stack_size(COMPILE_STACK_BYTES)
    try:
        thread = threading.Thread(target=target, name="script-compile", daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return cast(T, outcome["value"])


class ScriptCache(HandleCache[ScriptMeta, "CompiledScript"]):
    """Compiled scripts by (device queue, source digest) — see server/ai/handle_cache.py."""

    def __init__(self, capacity: int = SCRIPT_CACHE_CAPACITY, intra_op_threads: int = 1,
                 allow_ops: frozenset[str] = frozenset()) -> None:
        super().__init__(capacity)
        self._intra_op_threads = intra_op_threads
        self._allow_ops = allow_ops

    def cache_key(self, meta: ScriptMeta) -> CacheKey:
        return meta.device.queue_name, meta.digest

    async def build(self, meta: ScriptMeta, payload: bytes) -> CompiledScript:
        return await self.compile(payload, meta.device, meta.entry_points)

    def describe(self, meta: ScriptMeta) -> tuple[str, str, str]:
        return "script", "TORCH", meta.device.text

    async def compile(self, source: bytes, device: Device, entry_points: Sequence[str]) -> CompiledScript:
        """Compile ``source`` in a worker thread (checking its entry points), without caching it."""
        return await asyncio.to_thread(on_big_stack, compile_now, source, device, tuple(entry_points),
                                       self._intra_op_threads, self._allow_ops)
